package image_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// caBundle is where the image has the CA bundle, and where `make
// image-oci` takes it from by default (IMAGE_OCI_CA_BUNDLE).
const caBundle = "/etc/ssl/certs/ca-certificates.crt"

// TestImageOCI runs `make image-oci`, as a developer or CI does without a
// container engine, and reads the tarball it writes as the node's runtime
// would (`ctr images import` reads the same manifest.json): one image,
// tagged IMAGE_OCI_TAG's default, for linux on this machine's
// architecture, running /weighstation as 65532:65532, with the
// Dockerfile's labels, and holding exactly the two binaries `make
// binaries` wrote, byte for byte, /etc/passwd with the nonroot user, and
// the CA bundle (the sidecar verifies a tls:// broker against the
// system's roots unless -broker-tls-ca says otherwise).
func TestImageOCI(t *testing.T) {
	out := t.TempDir()
	args := []string{"--no-print-directory", "image-oci", "VERSION=" + testVersion, "BIN_DIR=" + out}
	bundle := caBundle
	if _, err := os.Stat(caBundle); err != nil { // not Debian's layout: the variable names one
		bundle = filepath.Join(t.TempDir(), "ca.pem")
		if err := os.WriteFile(bundle, []byte("a CA bundle\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "IMAGE_OCI_CA_BUNDLE="+bundle)
	}
	runMake(t, args...)
	img := readImage(t, filepath.Join(out, "weighstation-image.tar"), "ghcr.io/weighstation/weighstation:"+testVersion)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if cf.Config.User != "65532:65532" || !slices.Equal(cf.Config.Entrypoint, []string{"/weighstation"}) || len(cf.Config.Cmd) > 0 {
		t.Errorf("user %q, entrypoint %q, cmd %q; want 65532:65532, [/weighstation] and none (the chart gives the subcommand)",
			cf.Config.User, cf.Config.Entrypoint, cf.Config.Cmd)
	}
	if want := dockerfileLabels(t, testVersion, gitRevision(t)); !maps.Equal(cf.Config.Labels, want) {
		t.Errorf("labels %v, want the Dockerfile's: %v", cf.Config.Labels, want)
	}
	files := imageFiles(t, img)
	want := map[string]string{
		"/weighstation":         filepath.Join(out, "weighstation"),
		"/weighstation-sidecar": filepath.Join(out, "weighstation-sidecar"),
		caBundle:                bundle,
		"/etc/passwd":           "",
	}
	if !slices.Equal(slices.Sorted(maps.Keys(files)), slices.Sorted(maps.Keys(want))) {
		t.Fatalf("the image's files %q, want exactly %q", slices.Sorted(maps.Keys(files)), slices.Sorted(maps.Keys(want)))
	}
	for path, src := range want {
		if src == "" {
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(files[path].content, b) {
			t.Errorf("%s in the image is not %s (%d bytes, want %d)", path, src, len(files[path].content), len(b))
		}
	}
	for path, mode := range map[string]int64{"/weighstation": 0o755, "/weighstation-sidecar": 0o755, "/etc/passwd": 0o644, caBundle: 0o644} {
		if f := files[path]; f.mode != mode || f.uid != 0 || f.gid != 0 {
			t.Errorf("%s: mode %o owner %d:%d, want %o and root", path, f.mode, f.uid, f.gid, mode)
		}
	}
	if !slices.Contains(strings.Split(string(files["/etc/passwd"].content), "\n"), "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin") {
		t.Errorf("/etc/passwd has no nonroot user 65532:\n%s", files["/etc/passwd"].content)
	}
}

// TestImageOCIE2E runs `make image-oci-e2e` and reads the end-to-end
// tests' images: the pause stand-in (which stops, status 0, on SIGTERM),
// the demo's applications and, once test/e2e/probe exists, the probe;
// each one static binary with its entrypoint, under the tag the tests'
// manifests name.
func TestImageOCIE2E(t *testing.T) {
	out := t.TempDir()
	runMake(t, "--no-print-directory", "image-oci-e2e", "BIN_DIR="+out)
	tests := []struct {
		tar, tag, binary, user string
		passwd                 bool
	}{
		{"pause.tar", "registry.k8s.io/pause:3.10", "/pause", "65535:65535", false},
		{"demo-apps.tar", "weighstation.local/demo-apps:e2e", "/apps", "65532:65532", true},
		{"probe.tar", "weighstation.local/e2e-probe:e2e", "/probe", "65532:65532", true},
	}
	for _, tc := range tests {
		t.Run(tc.tar, func(t *testing.T) {
			path := filepath.Join(out, "e2e-images", tc.tar)
			if tc.tar == "probe.tar" {
				if probes, _ := filepath.Glob(filepath.Join(root, "test/e2e/probe/*.go")); len(probes) == 0 {
					if _, err := os.Stat(path); err == nil {
						t.Error("probe.tar packed without test/e2e/probe")
					}
					t.Skip("no test/e2e/probe yet")
				}
			}
			img := readImage(t, path, tc.tag)
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || cf.Config.User != tc.user || !slices.Equal(cf.Config.Entrypoint, []string{tc.binary}) {
				t.Errorf("%s/%s, user %q, entrypoint %q; want linux/%s, %s, [%s]", cf.OS, cf.Architecture, cf.Config.User, cf.Config.Entrypoint, runtime.GOARCH, tc.user, tc.binary)
			}
			files := imageFiles(t, img)
			want := []string{tc.binary}
			if tc.passwd {
				want = append(want, "/etc/passwd")
			}
			if got := slices.Sorted(maps.Keys(files)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
				t.Fatalf("files %q, want %q", got, want)
			}
			bin := filepath.Join(t.TempDir(), strings.TrimPrefix(tc.binary, "/"))
			if err := os.WriteFile(bin, files[tc.binary].content, 0o755); err != nil {
				t.Fatal(err)
			}
			checkStatic(t, bin)
			if tc.binary == "/pause" && runtime.GOOS == "linux" {
				checkPause(t, bin)
			}
		})
	}
}

// checkPause: pause runs until SIGTERM, then exits 0.
func checkPause(t *testing.T, bin string) {
	t.Helper()
	cmd := exec.Command(bin)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// SIGTERM once pause says it handles it (test/e2e/pause's Ready), not
	// after a guess at how long it takes to start, nor by /proc's SigCgt
	// mask, which the Go runtime sets for every signal before main runs:
	// before, SIGTERM kills it.
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stderr).ReadString('\n')
		if err == nil && line != "pause: waiting for SIGTERM or SIGINT\n" {
			err = fmt.Errorf("pause wrote %q first", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			_ = cmd.Process.Kill()
			t.Fatalf("pause's readiness: %v", err)
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("pause did not say it handles SIGTERM within 10s of its start")
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("pause after SIGTERM: %v, want exit status 0", err)
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Error("pause still runs 10s after SIGTERM")
	}
}

// runMake runs make in the repository (git is there, for the revision
// label), away from any outer make's job server and from the variables
// that would change what the targets write.
func runMake(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command("make", args...)
	cmd.Dir = root
	cmd.Env = withoutVars(os.Environ(), "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "GOOS", "GOARCH",
		"IMAGE_OCI", "IMAGE_OCI_TAG", "IMAGE_OCI_CA_BUNDLE", "IMAGE_OCI_E2E_DIR", "SOURCE_DATE_EPOCH")
	if log, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, log)
	}
}

// readImage reads the one image of the tarball at path and checks that
// it is tagged tag alone: the name the runtime imports it under.
func readImage(t *testing.T, path, tag string) v1.Image {
	t.Helper()
	manifest, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(manifest) != 1 || !slices.Equal(manifest[0].RepoTags, []string{tag}) || len(manifest[0].Layers) != 1 {
		t.Fatalf("%s: manifest.json %+v, want one image of one layer, tagged %s", filepath.Base(path), manifest, tag)
	}
	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return img
}

// imageFile is a regular file of an image.
type imageFile struct {
	mode     int64
	uid, gid int
	content  []byte
}

// imageFiles is the image's flattened filesystem: its regular files by
// absolute path, directories aside; anything else fails the test.
func imageFiles(t *testing.T, img v1.Image) map[string]imageFile {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]imageFile{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		path := "/" + strings.TrimPrefix(filepath.Clean("/"+hdr.Name), "/")
		switch hdr.Typeflag {
		case tar.TypeDir:
		case tar.TypeReg:
			content, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[path] = imageFile{mode: hdr.Mode, uid: hdr.Uid, gid: hdr.Gid, content: content}
		default:
			t.Errorf("%s: an entry of type %q in the image, want regular files and directories", path, hdr.Typeflag)
		}
	}
}

// dockerfileLabels is the Dockerfile's final stage's labels with the
// build arguments `make image` passes: VERSION and REVISION.
func dockerfileLabels(t *testing.T, version, revision string) map[string]string {
	t.Helper()
	stages := readDockerfile(t)
	labels := map[string]string{}
	for _, ins := range stages[len(stages)-1].instructions {
		if ins.cmd != "LABEL" {
			continue
		}
		for _, kv := range shellWords(ins.args) {
			k, v, _ := strings.Cut(kv, "=")
			labels[k] = strings.NewReplacer("${VERSION}", version, "$VERSION", version, "${REVISION}", revision, "$REVISION", revision).Replace(v)
		}
	}
	if len(labels) == 0 {
		t.Fatal("the Dockerfile's final stage has no LABEL")
	}
	return labels
}

// gitRevision is what the Makefile puts in the revision label: HEAD, or
// nothing outside a clone.
func gitRevision(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("git", "rev-parse", "HEAD")
	cmd.Dir = root
	b, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
