package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// testFiles makes, in a temporary directory, an executable "bin" and a
// plain "data", and returns the directory.
func testFiles(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeTestFile(t, filepath.Join(dir, "bin"), "#!binary\n", 0o755)
	writeTestFile(t, filepath.Join(dir, "data"), "data\n", 0o644)
	return dir
}

func writeTestFile(t *testing.T, path, content string, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil { // past the umask
		t.Fatal(err)
	}
}

// validArgs is a complete command line; each error case breaks one thing.
func validArgs(dir string) []string {
	return []string{"-out", filepath.Join(dir, "image.tar"), "-tag", "example.test/app:v1", "-file", filepath.Join(dir, "bin") + ":/app"}
}

func TestParseFlagsErrors(t *testing.T) {
	dir := testFiles(t)
	bin, data := filepath.Join(dir, "bin"), filepath.Join(dir, "data")
	out, tag := []string{"-out", filepath.Join(dir, "image.tar")}, []string{"-tag", "example.test/app:v1"}
	base := append(append([]string{}, out...), tag...)
	with := func(args ...string) []string { return append(append([]string{}, base...), args...) }
	tests := []struct {
		name string
		args []string
		env  string   // SOURCE_DATE_EPOCH
		want []string // in the error
	}{
		{"no -out", append(append([]string{}, tag...), "-file", bin+":/app"), "", []string{"-out", "missing"}},
		{"no -tag", append(append([]string{}, out...), "-file", bin+":/app"), "", []string{"-tag", "missing"}},
		{"two tags", with("-tag", "example.test/app:v2", "-file", bin+":/app"), "", []string{"-tag given 2 times"}},
		{"tag without registry", append(append([]string{}, out...), "-tag", "app:v1", "-file", bin+":/app"), "", []string{`-tag "app:v1"`}},
		{"tag without tag", append(append([]string{}, out...), "-tag", "example.test/app", "-file", bin+":/app"), "", []string{`-tag "example.test/app"`}},
		{"no file", base, "", []string{"-file", "missing"}},
		{"missing source", with("-file", filepath.Join(dir, "nope")+":/app"), "", []string{"-file", "nope", "no such file"}},
		{"relative destination", with("-file", bin+":app"), "", []string{"-file", "destination app", "not an absolute path"}},
		{"root destination", with("-file", bin+":/"), "", []string{"-file", "destination /"}},
		{"directory source", with("-file", dir+":/app"), "", []string{"-file", "not a regular file"}},
		{"no destination", with("-file", bin), "", []string{"-file", "SRC:DEST"}},
		{"too many colons", with("-file", bin+":/app:0755:x"), "", []string{"-file", "SRC:DEST"}},
		{"bad mode", with("-file", bin+":/app:rwx"), "", []string{"-file", `mode "rwx"`}},
		{"mode beyond permissions", with("-file", bin+":/app:4755"), "", []string{"-file", `mode "4755"`}},
		{"destination twice", with("-file", bin+":/app", "-file", data+":/app"), "", []string{"-file", "/app is the destination of another"}},
		{"passwd twice", with("-passwd", "-file", data+":/etc/passwd"), "", []string{"-passwd writes /etc/passwd"}},
		{"file under a file", with("-file", bin+":/app", "-file", data+":/app/data"), "", []string{"-file", "/app is a file"}},
		{"passwd under a file", with("-passwd", "-file", data+":/etc"), "", []string{"-file", "/etc is a file", "/etc/passwd"}},
		{"named user", with("-file", bin+":/app", "-user", "nonroot"), "", []string{`-user "nonroot"`, "numeric"}},
		{"three ids", with("-file", bin+":/app", "-user", "1:2:3"), "", []string{`-user "1:2:3"`}},
		{"empty gid", with("-file", bin+":/app", "-user", "65532:"), "", []string{`-user "65532:"`}},
		{"label without value", with("-file", bin+":/app", "-label", "title"), "", []string{`-label "title"`, "KEY=VALUE"}},
		{"label without key", with("-file", bin+":/app", "-label", "=x"), "", []string{`-label "=x"`}},
		{"label twice", with("-file", bin+":/app", "-label", "a=1", "-label", "a=2"), "", []string{"-label: a given twice"}},
		{"env without value", with("-file", bin+":/app", "-env", "PATH"), "", []string{`-env "PATH"`}},
		{"empty entrypoint argument", with("-file", bin+":/app", "-entrypoint", "/app,,x"), "", []string{"-entrypoint", "empty argument"}},
		{"relative workdir", with("-file", bin+":/app", "-workdir", "data"), "", []string{`-workdir "data"`}},
		{"empty arch", with("-file", bin+":/app", "-arch", ""), "", []string{"-arch"}},
		{"an argument", with("-file", bin+":/app", "extra"), "", []string{"unexpected arguments", "extra"}},
		{"unknown flag", with("-file", bin+":/app", "-from", "scratch"), "", []string{"-from"}},
		{"bad SOURCE_DATE_EPOCH", with("-file", bin+":/app"), "yesterday", []string{"SOURCE_DATE_EPOCH"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SOURCE_DATE_EPOCH", tc.env)
			_, err := parseFlags(tc.args, io.Discard)
			if err == nil {
				t.Fatalf("parseFlags(%q) accepted it", tc.args)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

func TestParseFlags(t *testing.T) {
	dir := testFiles(t)
	bin, data := filepath.Join(dir, "bin"), filepath.Join(dir, "data")
	t.Setenv("SOURCE_DATE_EPOCH", "")
	args := append(validArgs(dir),
		"-file", data+":/etc/app/data",
		"-file", data+":/b/exec:0750",
		"-file", bin+":/b/plain:644",
		"-passwd", "-user", "65532:65532",
		"-entrypoint", "/app,serve", "-entrypoint", "-v",
		"-label", "a=1", "-label", "b=x=y",
		"-env", "B=2", "-env", "A=1",
		"-workdir", "/tmp", "-arch", "arm64")
	opts, err := parseFlags(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, f := range opts.files {
		files = append(files, f.dest+" "+f.mode.String())
	}
	// Sorted by destination; the mode from the source's x bits unless given.
	want := []string{"/app -rwxr-xr-x", "/b/exec -rwxr-x---", "/b/plain -rw-r--r--", "/etc/app/data -rw-r--r--"}
	if !slices.Equal(files, want) {
		t.Errorf("files %q, want %q", files, want)
	}
	if !opts.passwd || opts.user != "65532:65532" || opts.workdir != "/tmp" || opts.arch != "arm64" || opts.tag.String() != "example.test/app:v1" {
		t.Errorf("options %+v", opts)
	}
	if !slices.Equal(opts.entrypoint, []string{"/app", "serve", "-v"}) {
		t.Errorf("entrypoint %q", opts.entrypoint)
	}
	if len(opts.labels) != 2 || opts.labels["a"] != "1" || opts.labels["b"] != "x=y" {
		t.Errorf("labels %v", opts.labels)
	}
	if !slices.Equal(opts.env, []string{"B=2", "A=1"}) {
		t.Errorf("env %q, want the order given", opts.env)
	}
	if !opts.mtime.Equal(time.Unix(0, 0)) {
		t.Errorf("mtime %v without SOURCE_DATE_EPOCH, want 1970-01-01", opts.mtime)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	if opts, err := parseFlags(validArgs(dir), io.Discard); err != nil || !opts.mtime.Equal(time.Unix(1700000000, 0)) {
		t.Errorf("with SOURCE_DATE_EPOCH=1700000000: mtime %v, %v", opts.mtime, err)
	}
}
