package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// createdBy is the layer's history entry: what made it.
const createdBy = "build/ociimage (weighstation): one layer on an empty base"

// build is the image opts describe: one layer of its files on the empty
// image (FROM scratch), and the configuration: linux/opts.arch, the user,
// entrypoint, labels, environment and working directory, created at
// opts.mtime.
func build(opts options) (v1.Image, error) {
	files, err := layerFiles(opts)
	if err != nil {
		return nil, err
	}
	b, err := layerTar(files, opts.mtime)
	if err != nil {
		return nil, err
	}
	layer, err := newLayer(b)
	if err != nil {
		return nil, fmt.Errorf("the layer: %w", err)
	}
	created := v1.Time{Time: opts.mtime}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: created, CreatedBy: createdBy},
	})
	if err != nil {
		return nil, fmt.Errorf("the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", opts.arch, created
	cf.Config = v1.Config{
		User:       opts.user,
		Entrypoint: opts.entrypoint,
		Labels:     opts.labels,
		Env:        opts.env,
		WorkingDir: opts.workdir,
	}
	if len(cf.Config.Labels) == 0 {
		cf.Config.Labels = nil
	}
	return mutate.ConfigFile(img, cf)
}

// write writes img, named tag, as a `docker save` tarball at out: into a
// temporary file beside it, renamed into place, so that out is never half
// written.
func write(out string, tag name.Tag, img v1.Image) error {
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp*")
	if err != nil {
		return fmt.Errorf("-out %s: %w", out, err)
	}
	defer os.Remove(tmp.Name()) // after a failure; gone after the rename
	werr := tarball.Write(tag, img, tmp)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("writing %s: %w", out, werr)
	}
	// CreateTemp makes it 0600; a tarball is for anyone to import.
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return fmt.Errorf("-out %s: %w", out, err)
	}
	return nil
}
