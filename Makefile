# One target per thing a developer does. `make help` lists them.
SHELL := /usr/bin/env bash
GO ?= go

.PHONY: help
help: ## List the targets.
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-16s %s\n", $$1, $$2}'

.PHONY: test
test: ## Vet, then run every test with the race detector (what CI runs).
	$(GO) vet ./...
	$(GO) test -race -timeout 30m ./...

.PHONY: bench-matcher
bench-matcher: ## Matcher benchmarks vs nats-server's gsl and an RWMutex trie: medians and ratios.
	$(GO) run ./hack/benchmatcher -count $${COUNT:-5} -benchtime $${BENCHTIME:-1s}

.PHONY: fuzz-matcher
fuzz-matcher: ## Fuzz subject validation and differential operation sequences (FUZZTIME each).
	$(GO) test -run '^$$' -fuzz '^FuzzValidate$$' -fuzztime $${FUZZTIME:-30s} ./matcher/
	$(GO) test -run '^$$' -fuzz '^FuzzDifferential$$' -fuzztime $${FUZZTIME:-30s} ./matcher/

.PHONY: generate
generate: ## Regenerate generated code; CI expects the tree unchanged after it.
	$(GO) generate ./...
	$(GO) mod tidy

.PHONY: lint
lint: ## gofmt and go vet.
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet ./...
