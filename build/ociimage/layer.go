package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// layerFile is one regular file of the layer.
type layerFile struct {
	dest    string // absolute
	mode    int64
	content []byte
}

// layerFiles reads the files opts puts in the image (and passwd's), once:
// the layer is made from what was read, whatever the sources do after.
func layerFiles(opts options) ([]layerFile, error) {
	var files []layerFile
	for _, spec := range opts.files {
		content, err := os.ReadFile(spec.src)
		if err != nil {
			return nil, fmt.Errorf("-file %s:%s: %w", spec.src, spec.dest, err)
		}
		files = append(files, layerFile{dest: spec.dest, mode: int64(spec.mode.Perm()), content: content})
	}
	if opts.passwd {
		files = append(files, layerFile{dest: passwdPath, mode: 0o644, content: []byte(passwd)})
	}
	return files, nil
}

// layerTar is the uncompressed layer: files, with the directories above
// them first, each once, in order of path, owned by root, timed mtime.
// The same files make the same bytes.
func layerTar(files []layerFile, mtime time.Time) ([]byte, error) {
	byPath := map[string]*layerFile{}
	dirs := map[string]bool{}
	for i, f := range files {
		byPath[f.dest] = &files[i]
		for dir := path.Dir(f.dest); dir != "/"; dir = path.Dir(dir) {
			dirs[dir] = true
		}
	}
	var paths []string
	for p := range byPath {
		paths = append(paths, p)
	}
	for d := range dirs {
		paths = append(paths, d)
	}
	// Sorted by path, "/" before any other character: a directory comes
	// before what it holds (/etc, /etc/passwd, /etc-x).
	sortPaths(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		hdr := &tar.Header{
			Name:    strings.TrimPrefix(p, "/"),
			ModTime: mtime,
			Uname:   "root",
			Gname:   "root",
		}
		if f := byPath[p]; f != nil {
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, f.mode, int64(len(f.content))
		} else {
			hdr.Typeflag, hdr.Mode, hdr.Name = tar.TypeDir, 0o755, hdr.Name+"/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", p, err)
		}
		if f := byPath[p]; f != nil {
			if _, err := tw.Write(f.content); err != nil {
				return nil, fmt.Errorf("layer entry %s: %w", p, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// sortPaths sorts absolute paths element by element, so that a
// directory's entries follow it directly.
func sortPaths(paths []string) {
	key := func(p string) string { return strings.ReplaceAll(p, "/", "\x00") }
	slices.SortFunc(paths, func(a, b string) int { return strings.Compare(key(a), key(b)) })
}

// newLayer is the layer of the uncompressed tar b, gzipped (Go's gzip
// writes no time or name: the same b makes the same blob).
func newLayer(b []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithCompressedCaching)
}
