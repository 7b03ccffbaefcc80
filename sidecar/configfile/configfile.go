// Package configfile is the sidecar's file source of configuration: a
// meshconfig.PodConfig in JSON or YAML, reloaded when the file changes (as a
// mounted ConfigMap does). The xDS source of a later issue replaces it
// behind the same apply function.
package configfile

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/weighstation/weighstation/meshconfig"
)

// MaxFileBytes bounds the configuration file: a pod's configuration is a
// few kilobytes; a larger file is a mistake, not a configuration.
const MaxFileBytes = 4 << 20

// Load reads and decodes a configuration (YAML or JSON; unknown fields are
// refused, so a typo does not silently drop a limit).
func Load(path string) (meshconfig.PodConfig, []byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return meshconfig.PodConfig{}, nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > MaxFileBytes {
		return meshconfig.PodConfig{}, nil, fmt.Errorf("%s is %d bytes, over the %d-byte limit", path, len(data), MaxFileBytes)
	}
	var cfg meshconfig.PodConfig
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return meshconfig.PodConfig{}, nil, fmt.Errorf("decoding %s: %w", path, err)
	}
	return cfg, data, nil
}

// Watch applies the file's configuration now and whenever its content
// changes, checking every interval until ctx ends. A configuration that
// cannot be read or that apply refuses is reported to onError, and the last
// good one stays in force. The first load's error is returned.
func Watch(ctx context.Context, path string, interval time.Duration, apply func(meshconfig.PodConfig) error, onError func(error)) error {
	cfg, last, err := Load(path)
	if err != nil {
		return err
	}
	if err := apply(cfg); err != nil {
		return err
	}
	go func() {
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			cfg, data, err := Load(path)
			if err != nil {
				onError(err)
				continue
			}
			if bytes.Equal(data, last) {
				continue
			}
			last = data
			if err := apply(cfg); err != nil {
				onError(fmt.Errorf("%s: %w", path, err))
			}
		}
	}()
	return nil
}
