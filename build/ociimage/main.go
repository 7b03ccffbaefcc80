// Command ociimage packs files into a one-layer container image on an
// empty base (FROM scratch) and writes it as an image tarball, without a
// container engine or a registry: `make image-oci` packs the weighstation
// image with it, and `make image-oci-e2e` the end-to-end tests' images.
//
//	ociimage -out bin/weighstation-image.tar \
//	  -tag ghcr.io/weighstation/weighstation:v1.2.3 \
//	  -file bin/weighstation:/weighstation -file bin/weighstation-sidecar:/weighstation-sidecar \
//	  -passwd -user 65532:65532 -entrypoint /weighstation \
//	  -label org.opencontainers.image.version=v1.2.3
//
// The tarball is in the format of `docker save` (manifest.json, the
// config, the gzipped layer), which `docker load`, `podman load` and
// containerd's `ctr -n k8s.io images import FILE` read. The same inputs
// make the same bytes: every file and directory in the layer is owned by
// root with a fixed time (SOURCE_DATE_EPOCH, else 1970-01-01), and so is
// the image's creation time.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
)

func main() {
	err := run(os.Args[1:])
	switch {
	case errors.Is(err, flag.ErrHelp): // -h: the flags were printed
	case err != nil:
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

// run packs the image the flags in args describe and writes it.
func run(args []string) error {
	opts, err := parseFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	img, err := build(opts)
	if err != nil {
		return err
	}
	return write(opts.out, opts.tag, img)
}
