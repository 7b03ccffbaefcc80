//go:build tools

// Package tools pins the code generators that `make generate` builds into
// bin/. It is a separate module so that the main module's go.mod does not
// carry the generators' dependencies; build them with
// `go build -modfile=tools/go.mod` (see the Makefile).
package tools

import (
	_ "github.com/bufbuild/buf/cmd/buf"
	_ "google.golang.org/grpc/cmd/protoc-gen-go-grpc"
	_ "google.golang.org/protobuf/cmd/protoc-gen-go"
)
