// Package configfile is the sidecar's file source of configuration, for a
// sidecar without the operator: a meshconfig.PodConfig in YAML or JSON
// (config/samples/sidecar/sidecar-config.yaml documents it), reloaded when the file
// changes (as a mounted ConfigMap does). The xDS client is the other source,
// behind the same apply function.
package configfile

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/weighstation/weighstation/meshconfig"
)

// MaxFileBytes bounds the configuration file: a pod's configuration is a
// few kilobytes; a larger file is a mistake, not a configuration.
const MaxFileBytes = 4 << 20

// Load reads and decodes a configuration, in YAML or JSON (format says
// which), with meshconfig.FromDocument: unknown keys are refused with
// their path, so a typo does not silently drop a limit, and keys left out
// get the cluster's defaults. It returns the bytes it read even when they
// do not decode.
func Load(path string) (meshconfig.PodConfig, []byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return meshconfig.PodConfig{}, nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > MaxFileBytes {
		return meshconfig.PodConfig{}, data, fmt.Errorf("%s is %d bytes, over the %d-byte limit", path, len(data), MaxFileBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return meshconfig.PodConfig{}, data, fmt.Errorf("%s is empty", path)
	}
	f := format(path, data)
	doc, err := f.parse(data)
	if err != nil {
		return meshconfig.PodConfig{}, data, fmt.Errorf("decoding %s as %s: %w", path, f, err)
	}
	cfg, err := meshconfig.FromDocument(doc)
	if err != nil {
		return meshconfig.PodConfig{}, data, fmt.Errorf("decoding %s as %s: %w", path, f, err)
	}
	return cfg, data, nil
}

// Watch applies the file's configuration now and whenever its content
// changes, checking every interval until ctx ends. New content is acted on
// once the same bytes were read twice in a row, so a file caught in the
// middle of being written is neither applied nor reported. Content that
// cannot be decoded or that apply refuses is reported to onError once, and
// the last good configuration stays in force. The first load's error is
// returned.
func Watch(ctx context.Context, path string, interval time.Duration, apply func(meshconfig.PodConfig) error, onError func(error)) error {
	cfg, applied, err := Load(path)
	if err != nil {
		return err
	}
	if err := apply(cfg); err != nil {
		return err
	}
	go func() {
		var candidate, reported []byte
		haveReported := false // reported may be nil: a missing file
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			cfg, data, err := Load(path)
			switch {
			case bytes.Equal(data, applied) && err == nil:
				candidate = nil // unchanged
				continue
			case !bytes.Equal(data, candidate):
				candidate = data // wait for the next read to agree
				continue
			case haveReported && bytes.Equal(data, reported):
				continue // this bad content was reported already
			}
			if err == nil {
				err = apply(cfg)
			}
			if err != nil {
				reported, haveReported = data, true
				onError(fmt.Errorf("%s: %w", path, err))
				continue
			}
			applied, reported, haveReported = data, nil, false
		}
	}()
	return nil
}
