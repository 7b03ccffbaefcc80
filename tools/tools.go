//go:build tools

// Package tools pins the code generators that `make generate` builds into
// bin/, and the clone detector (dupl) that hack/clones.sh builds into bin/
// for `make test`. It is a separate module so that the main module's go.mod
// does not carry the tools' dependencies; build them with
// `go build -modfile=tools/go.mod` (see the Makefile).
package tools

import (
	_ "github.com/bufbuild/buf/cmd/buf"
	_ "github.com/mibk/dupl"
	_ "google.golang.org/grpc/cmd/protoc-gen-go-grpc"
	_ "google.golang.org/protobuf/cmd/protoc-gen-go"
)
