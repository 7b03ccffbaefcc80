// Package image_test checks the image without a container engine: the
// binaries its build stage makes (`make binaries`, run here from a copy of
// the build context, what .dockerignore leaves), and the Dockerfile's text
// (the build stage runs that target; the final stage is distroless static
// or scratch, non-root, with both binaries).
package image_test

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository, from this package's directory.
const root = "../.."

// dockerignore is a .dockerignore's exclusions, matched as docker and
// podman match them: a path is excluded when a pattern matches it or one
// of its parent directories; * and ? stay within a path element, ** spans
// any number of them. Exceptions (!) and character classes are not
// supported: parseDockerignore refuses them, so that this test never
// silently disagrees with the engines.
type dockerignore []*regexp.Regexp

func parseDockerignore(text string) (dockerignore, error) {
	var ig dockerignore
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") || strings.ContainsAny(line, `[\`) {
			return nil, fmt.Errorf(".dockerignore line %d: %q: exceptions and character classes are not supported by this test's matcher", n+1, line)
		}
		pattern := filepath.ToSlash(filepath.Clean(strings.TrimPrefix(line, "/")))
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(pattern); {
			switch rest := pattern[i:]; {
			case strings.HasPrefix(rest, "**/"):
				re.WriteString("(.*/)?")
				i += 3
			case strings.HasPrefix(rest, "**"):
				re.WriteString(".*")
				i += 2
			case rest[0] == '*':
				re.WriteString("[^/]*")
				i++
			case rest[0] == '?':
				re.WriteString("[^/]")
				i++
			default:
				re.WriteString(regexp.QuoteMeta(rest[:1]))
				i++
			}
		}
		re.WriteString("$")
		ig = append(ig, regexp.MustCompile(re.String()))
	}
	return ig, nil
}

// excludes reports whether the context leaves out path (slash-separated,
// relative to the context's root).
func (ig dockerignore) excludes(path string) bool {
	for p := path; p != "." && p != "/"; p = filepath.ToSlash(filepath.Dir(p)) {
		for _, re := range ig {
			if re.MatchString(p) {
				return true
			}
		}
	}
	return false
}

func readDockerignore(t *testing.T) dockerignore {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatalf(".dockerignore: %v (without it the context carries .git and bin/ into every build)", err)
	}
	ig, err := parseDockerignore(string(text))
	if err != nil {
		t.Fatal(err)
	}
	return ig
}

func TestDockerignoreMatcher(t *testing.T) {
	ig, err := parseDockerignore("# a comment\n.git\n/bin/\n**/*.test\nhack/*.out\n*.md\n")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path string
		want bool
	}{
		{".git", true},
		{".git/HEAD", true},
		{"bin/weighstation", true},
		{"cmd/bin/x", false},
		{"x.test", true},
		{"sidecar/report/report.test", true},
		{"hack/a.out", true},
		{"hack/x/a.out", false},
		{"README.md", true},
		{"sidecar/README.md", false},
		{"main.go", false},
		{".gitignore", false},
	}
	for _, tc := range tests {
		if got := ig.excludes(tc.path); got != tc.want {
			t.Errorf("excludes(%q) = %t, want %t", tc.path, got, tc.want)
		}
	}
	for _, bad := range []string{"!keep.go", "[ab].go"} {
		if _, err := parseDockerignore(bad); err == nil {
			t.Errorf("parseDockerignore(%q) accepted a pattern it cannot match as the engines do", bad)
		}
	}
}

// TestDockerignore: the context leaves out the repository (.git) and the
// local binaries and tool links (bin/), and keeps what `make binaries`
// reads. TestBinaries builds from what is left.
func TestDockerignore(t *testing.T) {
	ig := readDockerignore(t)
	tests := []struct {
		path string
		want bool
	}{
		{".git", true},
		{".git/config", true},
		{"bin", true},
		{"bin/weighstation", true},
		{"bin/k8s/kube-apiserver", true},
		{"go.mod", false},
		{"go.sum", false},
		{"Makefile", false},
		{"tools/go.mod", false},
		{"cmd/weighstation/main.go", false},
		{"cmd/weighstation-sidecar/main.go", false},
		{"cmd/weighstation-sidecar/sidecarapp/sidecarapp.go", false},
	}
	for _, tc := range tests {
		if got := ig.excludes(tc.path); got != tc.want {
			t.Errorf(".dockerignore excludes %s: %t, want %t", tc.path, got, tc.want)
		}
	}
}

// copyContext copies into dir the files of the repository that the build
// context holds: those .dockerignore leaves.
func copyContext(t *testing.T, ig dockerignore, dir string) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		if ig.excludes(filepath.ToSlash(rel)) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		case d.Type().IsRegular():
			return copyFile(path, filepath.Join(dir, rel))
		default:
			return fmt.Errorf("%s: a %s in the build context; docker would send it, this test cannot copy it", rel, d.Type())
		}
	})
	if err != nil {
		t.Fatalf("copying the build context: %v", err)
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_EXCL, info.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
