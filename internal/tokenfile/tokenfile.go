// Package tokenfile reads the broker token that the broker and the sidecar
// share, from a file, so that it never shows in a process listing. It is
// apart from both commands so that the sidecar's binary, which links no
// Kubernetes package, and the weighstation binary share it.
package tokenfile

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// Read reads the token at path, -token-file in both commands.
func Read(path string) (string, error) {
	if path == "" {
		return "", errors.New("-token-file is required (or nkeys: -sidecar-nkeys for the broker, -nkey-seed-file for the sidecar): the broker admits sidecars only")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the token: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return token, nil
}
