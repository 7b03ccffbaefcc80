package benchharness

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// WriteSummary writes a bench's summary (v) as indented JSON into
// dir/summary.json.
func WriteSummary(dir string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "summary.json"), append(b, '\n'), 0o644)
}

// MiB is a byte count in MiB, 0 when reading it failed.
func MiB(b int64, err error) float64 {
	if err != nil {
		return 0
	}
	return float64(b) / (1 << 20)
}
