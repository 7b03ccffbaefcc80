package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
	"time"
)

// TestLayerTar: directories before what they hold, each once, files with
// their modes and contents, everything owned by root at the given time.
func TestLayerTar(t *testing.T) {
	mtime := time.Unix(1700000000, 0).UTC()
	files := []layerFile{
		{dest: "/weighstation", mode: 0o755, content: []byte("binary")},
		{dest: "/etc/ssl/certs/ca.crt", mode: 0o644, content: []byte("certs")},
		{dest: "/etc/passwd", mode: 0o644, content: []byte(passwd)},
		{dest: "/etc-x", mode: 0o600, content: nil},
	}
	b, err := layerTar(files, mtime)
	if err != nil {
		t.Fatal(err)
	}
	type entry struct {
		name    string
		typ     byte
		mode    int64
		content string
	}
	var got []entry
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		content, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, entry{hdr.Name, hdr.Typeflag, hdr.Mode, string(content)})
		if hdr.Uid != 0 || hdr.Gid != 0 || !hdr.ModTime.Equal(mtime) {
			t.Errorf("%s: owner %d:%d, time %v; want 0:0 at %v", hdr.Name, hdr.Uid, hdr.Gid, hdr.ModTime, mtime)
		}
	}
	want := []entry{
		{"etc/", tar.TypeDir, 0o755, ""},
		{"etc/passwd", tar.TypeReg, 0o644, passwd},
		{"etc/ssl/", tar.TypeDir, 0o755, ""},
		{"etc/ssl/certs/", tar.TypeDir, 0o755, ""},
		{"etc/ssl/certs/ca.crt", tar.TypeReg, 0o644, "certs"},
		{"etc-x", tar.TypeReg, 0o600, ""},
		{"weighstation", tar.TypeReg, 0o755, "binary"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("layer\n%v\nwant\n%v", got, want)
	}
	// The same files in another order: the same bytes.
	slices.Reverse(files)
	again, err := layerTar(files, mtime)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, again) {
		t.Error("the same files in another order make another layer")
	}
}
