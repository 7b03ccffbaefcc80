package e2e

import (
	"bytes"
	"fmt"
	"io"
	"os"
)

// tailChunk is how much of a log's end TailLines reads: enough for 40
// lines of a node component's log, without reading gigabytes.
const tailChunk = 256 << 10

// TailLines returns the last n lines of the file at path.
func TailLines(path string, n int) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("opening %s: %w", path, err)
	}
	defer f.Close()
	tail, err := tailLines(f, n)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return tail, nil
}

func tailLines(r io.ReadSeeker, n int) (string, error) {
	size, err := r.Seek(0, io.SeekEnd)
	if err != nil {
		return "", fmt.Errorf("seeking: %w", err)
	}
	start := max(size-tailChunk, 0)
	if _, err := r.Seek(start, io.SeekStart); err != nil {
		return "", fmt.Errorf("seeking: %w", err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return "", fmt.Errorf("reading: %w", err)
	}
	b = bytes.TrimRight(b, "\n")
	lines := bytes.Split(b, []byte("\n"))
	if start > 0 && len(lines) > 1 {
		lines = lines[1:] // the first is cut
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n"))), nil
}
