package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestRun writes an image and reads it back as `ctr images import` and
// `docker load` would: the tag in manifest.json, the configuration, and
// the files of the one layer.
func TestRun(t *testing.T) {
	dir := testFiles(t)
	t.Setenv("SOURCE_DATE_EPOCH", "")
	out := filepath.Join(dir, "image.tar")
	err := run([]string{"-out", out, "-tag", "example.test/team/app:v1",
		"-file", filepath.Join(dir, "bin") + ":/app", "-file", filepath.Join(dir, "data") + ":/usr/share/app/data",
		"-passwd", "-user", "65532:65532", "-entrypoint", "/app,serve",
		"-label", "org.opencontainers.image.version=v1", "-env", "A=1", "-workdir", "/usr/share/app", "-arch", "arm64"})
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(out) })
	if err != nil {
		t.Fatal(err)
	}
	if len(manifest) != 1 || !slices.Equal(manifest[0].RepoTags, []string{"example.test/team/app:v1"}) || len(manifest[0].Layers) != 1 {
		t.Fatalf("manifest.json %+v, want one image, tagged example.test/team/app:v1, of one layer", manifest)
	}
	img, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.OS != "linux" || cf.Architecture != "arm64" || !cf.Created.Equal(time.Unix(0, 0)) {
		t.Errorf("platform %s/%s created %v, want linux/arm64 at 1970-01-01", cf.OS, cf.Architecture, cf.Created)
	}
	if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/app", "serve"}) || c.Cmd != nil ||
		!slices.Equal(c.Env, []string{"A=1"}) || c.WorkingDir != "/usr/share/app" || len(c.Labels) != 1 || c.Labels["org.opencontainers.image.version"] != "v1" {
		t.Errorf("config %+v", c)
	}
	if len(cf.History) != 1 || cf.History[0].CreatedBy != createdBy || len(cf.RootFS.DiffIDs) != 1 {
		t.Errorf("history %+v, rootfs %+v: want one layer", cf.History, cf.RootFS)
	}
	files := extract(t, out)
	want := map[string]string{"app": "#!binary\n", "usr/share/app/data": "data\n", "etc/passwd": passwd}
	if len(files) != len(want) {
		t.Errorf("files %v, want %v", slices.Sorted(maps.Keys(files)), slices.Sorted(maps.Keys(want)))
	}
	for name, content := range want {
		if files[name] != content {
			t.Errorf("%s holds %q, want %q", name, files[name], content)
		}
	}
	if !strings.Contains(files["etc/passwd"], "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot 65532:\n%s", files["etc/passwd"])
	}
	if info, err := os.Stat(out); err != nil || info.Mode().Perm() != 0o644 {
		t.Errorf("the tarball: %v, %v; want mode 0644", info.Mode(), err)
	}
}

// TestReproducible: the same inputs make the same tarball, byte for byte,
// whenever and wherever they are packed (the sources' times and modes
// aside); another content, tag or SOURCE_DATE_EPOCH makes another.
func TestReproducible(t *testing.T) {
	dir := testFiles(t)
	bin := filepath.Join(dir, "bin")
	pack := func(name, tag string) [sha256.Size]byte {
		t.Helper()
		out := filepath.Join(t.TempDir(), name)
		args := []string{"-out", out, "-tag", tag, "-file", bin + ":/app", "-passwd", "-user", "65532:65532",
			"-entrypoint", "/app", "-label", "a=1", "-label", "b=2"}
		if err := run(args); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return sha256.Sum256(b)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "")
	first := pack("a.tar", "example.test/app:v1")
	// Newer times on the source, another output name: the same bytes.
	if err := os.Chtimes(bin, time.Now(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if again := pack("b.tar", "example.test/app:v1"); again != first {
		t.Error("packing the same inputs twice made two tarballs")
	}
	t.Run("label order", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "c.tar")
		if err := run([]string{"-out", out, "-tag", "example.test/app:v1", "-label", "b=2", "-label", "a=1", "-file", bin + ":/app", "-passwd", "-user", "65532:65532", "-entrypoint", "/app"}); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(out)
		if sha256.Sum256(b) != first {
			t.Error("the flags in another order made another tarball")
		}
	})
	if pack("tag.tar", "example.test/app:v2") == first {
		t.Error("another tag made the same tarball")
	}
	writeTestFile(t, bin, "#!another binary\n", 0o755)
	content := pack("content.tar", "example.test/app:v1")
	if content == first {
		t.Error("another content made the same tarball")
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	if pack("epoch.tar", "example.test/app:v1") == content {
		t.Error("another SOURCE_DATE_EPOCH made the same tarball")
	}
}

// TestRunErrors: a failure leaves no tarball, not even a temporary one.
func TestRunErrors(t *testing.T) {
	dir := testFiles(t)
	if err := run([]string{"-out", filepath.Join(dir, "missing", "image.tar"), "-tag", "example.test/app:v1", "-file", filepath.Join(dir, "bin") + ":/app"}); err == nil || !strings.Contains(err.Error(), "-out") {
		t.Errorf("writing into a missing directory: %v, want an error naming -out", err)
	}
	out := filepath.Join(dir, "image.tar")
	if err := run([]string{"-out", out, "-tag", "example.test/app:v1", "-file", filepath.Join(dir, "nope") + ":/app"}); err == nil {
		t.Error("a missing source was accepted")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tar") {
			t.Errorf("%s left behind", e.Name())
		}
	}
}

// extract is the flattened filesystem of the tarball's image: the regular
// files by path (without the leading /), directories aside.
func extract(t *testing.T, path string) map[string]string {
	t.Helper()
	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
		case tar.TypeReg:
			var b bytes.Buffer
			if _, err := io.Copy(&b, tr); err != nil {
				t.Fatal(err)
			}
			files[strings.TrimPrefix(hdr.Name, "/")] = b.String()
		default:
			t.Errorf("%s: a %c entry, want regular files and directories only", hdr.Name, hdr.Typeflag)
		}
	}
}
