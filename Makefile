# One target per thing a developer does. `make help` lists them.
SHELL := /usr/bin/env bash
GO ?= go

CONTROLLER_TOOLS_VERSION := v0.23.0
CONTROLLER_GEN := $(CURDIR)/bin/controller-gen-$(CONTROLLER_TOOLS_VERSION)
# buf and protoc-gen-go are pinned in tools/go.mod (a module of its own, so
# the main go.mod does not carry their dependencies); the versions in the
# binaries' names come from there, so bumping tools/go.mod rebuilds them.
tools_version = $(shell awk '$$1 == "$(1)" { print $$2 }' tools/go.mod 2>/dev/null)
BUF_VERSION := $(call tools_version,github.com/bufbuild/buf)
PROTOC_GEN_GO_VERSION := $(call tools_version,google.golang.org/protobuf)
BUF := $(CURDIR)/bin/buf-$(BUF_VERSION)
PROTOC_GEN_GO := $(CURDIR)/bin/protoc-gen-go-$(PROTOC_GEN_GO_VERSION)
PROTOC_GEN_GO_GRPC_VERSION := $(call tools_version,google.golang.org/grpc/cmd/protoc-gen-go-grpc)
PROTOC_GEN_GO_GRPC := $(CURDIR)/bin/protoc-gen-go-grpc-$(PROTOC_GEN_GO_GRPC_VERSION)
# The version the binaries report (`weighstation version`,
# `weighstation-sidecar -version`): `git describe`, or VERSION=... where
# there is no .git (the image's build stage: `make image` passes it in).
ifndef VERSION
VERSION := $(shell git describe --tags --always --dirty 2>/dev/null)
endif
VERSION := $(or $(VERSION),unknown)
VERSION_LDFLAGS := -X github.com/weighstation/weighstation/internal/version.Version=$(VERSION)
# Where build and binaries put weighstation and weighstation-sidecar.
BIN_DIR ?= bin
# The image `make image` builds and `make image-push` pushes, and the tool
# that does it: docker, else podman.
IMAGE ?= ghcr.io/weighstation/weighstation:$(VERSION)
CONTAINER_TOOL ?= $(notdir $(shell command -v docker 2>/dev/null || command -v podman 2>/dev/null))
# The envtest binaries (etcd, kube-apiserver, kubectl), built by
# hack/setup-envtest.sh from their Go modules and linked here.
KUBEBUILDER_ASSETS := $(CURDIR)/bin/k8s

.PHONY: help
help: ## List the targets.
	@grep -E '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-16s %s\n", $$1, $$2}'

.PHONY: test
test: ## Build the test tools if needed, vet, check generated files, find copied code (hack/clones.sh), run every test with -race, then the stories on a real node (make e2e): what CI runs; each phase prints its time.
	$(call phase,tools,hack/setup-envtest.sh)
	$(call phase,vet,$(GO) vet ./... && $(GO) vet -tags e2e ./test/e2e/...)
	$(call phase,generated files,hack/verify-generate.sh)
	$(call phase,clones,hack/clones.sh)
	$(call phase,go test,KUBEBUILDER_ASSETS=$(KUBEBUILDER_ASSETS) PATH=$(CURDIR)/bin:$$PATH $(GO) test -race -timeout 30m ./...)
	$(call phase,e2e on a real node,hack/e2e.sh)

# $(call phase,NAME,COMMAND): runs COMMAND and says how long it took.
phase = @t0=$$(date +%s); echo "make test: phase $(1)" >&2; rc=0; $(2) || rc=$$?; \
	echo "make test: phase $(1) $$([ $$rc = 0 ] && echo passed || echo FAILED) in $$(( $$(date +%s) - t0 ))s" >&2; exit $$rc

.PHONY: node
node: ## Build (once, cached outside the clone) and install what a real single-node cluster needs: kubelet, controller manager, scheduler, kube-proxy, containerd, CoreDNS; runc, CNI plugins, iptables from Debian.
	hack/setup-node.sh

.PHONY: e2e
e2e: ## The stories on a real Kubernetes node built on this machine in a network namespace of its own (root); KUBECONFIG=... runs them against an existing cluster instead (test/e2e/README.md).
	hack/e2e.sh

.PHONY: envtest
envtest: ## Build (once, cached outside the clone) etcd, kube-apiserver, kubectl and helm for the tests.
	hack/setup-envtest.sh

.PHONY: bench-matcher
bench-matcher: ## Matcher benchmarks, cache on and off, vs nats-server's gsl and an RWMutex trie: medians and ratios.
	$(GO) run ./test/bench/matcher -count $${COUNT:-5} -benchtime $${BENCHTIME:-1s}

.PHONY: bench-matcher-nats
bench-matcher-nats: ## Matcher vs nats-server's cached Sublist and gsl, inside a scratch copy of its server package.
	$(GO) run ./test/bench/matchernats -count $${COUNT:-5} -benchtime $${BENCHTIME:-1s}

.PHONY: bench-bundle
bench-bundle: ## Pack static binaries of bench-sidecar's processes and both matcher suites into bin/bench-bundle.tgz, to run on a machine without Go (hack/benchbundle.sh: build, run OUT, report DIR).
	hack/benchbundle.sh build

.PHONY: bench-sidecar-core
bench-sidecar-core: build ## Publish-to-delivery through the sidecar vs directly, 1 KiB, interleaved rounds (ROUNDS); then the sidecar's allocations per message over MESSAGES (10⁶) of a stated mix, in a process of its own.
	$(GO) test -run '^$$' -bench '^BenchmarkPublishToDelivery$$' -benchtime $${ROUNDS:-5}x ./sidecar/
	$(GO) run ./test/bench/sidecaralloc -bin bin/weighstation -messages $${MESSAGES:-1000000}

BENCH_DURATION ?= 30s
BENCH_ROUNDS ?= 5
# bench-reports: sidecars, the measured period after the warm-up, and
# whether each interval repeats the same values (repeat: a steady flow) or
# draws new ones (fresh: real traffic's sampling noise).
SIDECARS ?= 1000
DURATION ?= 3m
SAMPLES ?= fresh

.PHONY: build
build: ## Build bin/weighstation (operator, broker, bench) and bin/weighstation-sidecar for this machine, VERSION stamped (BIN_DIR).
	$(GO) build -ldflags "$(VERSION_LDFLAGS)" -o $(BIN_DIR)/weighstation ./cmd/weighstation
	$(GO) build -ldflags "$(VERSION_LDFLAGS)" -o $(BIN_DIR)/weighstation-sidecar ./cmd/weighstation-sidecar

# What the image ships, and what its build stage runs: static (no cgo, so
# no libc in the image), no local paths (-trimpath), no symbol tables (-s
# -w); GOOS and GOARCH from the environment, for the image's platform.
.PHONY: binaries
binaries: ## Build both binaries as the image ships them: static, -trimpath, stripped, VERSION stamped (BIN_DIR, VERSION); needs only Go.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)" -o $(BIN_DIR)/weighstation ./cmd/weighstation
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)" -o $(BIN_DIR)/weighstation-sidecar ./cmd/weighstation-sidecar

.PHONY: image
image: ## Build the image IMAGE (both binaries, distroless, non-root) with CONTAINER_TOOL (docker, else podman); the Dockerfile runs `make binaries`.
	@if [ -z "$(CONTAINER_TOOL)" ]; then \
	  echo "make image: neither docker nor podman is on PATH; install one, or name another tool with CONTAINER_TOOL=..." >&2; exit 1; fi
	$(CONTAINER_TOOL) build --build-arg VERSION=$(VERSION) \
	  --build-arg REVISION=$$(git rev-parse HEAD 2>/dev/null) -t $(IMAGE) .

.PHONY: image-push
image-push: ## Push IMAGE (after `make image`) with CONTAINER_TOOL.
	@if [ -z "$(CONTAINER_TOOL)" ]; then \
	  echo "make image-push: neither docker nor podman is on PATH; install one, or name another tool with CONTAINER_TOOL=..." >&2; exit 1; fi
	$(CONTAINER_TOOL) push $(IMAGE)

# `make image-oci`: the image without a container engine or a registry.
# build/ociimage packs what `make binaries` built, /etc/passwd (nonroot,
# 65532) and the CA bundle (for a tls:// broker verified against the
# system's roots) into one layer on an empty base, with the Dockerfile's
# user, entrypoint and labels, and writes a `docker save` tarball:
# `ctr -n k8s.io images import $(IMAGE_OCI)` on a node (or docker/podman
# load). The binaries are for linux, GOARCH from the environment.
IMAGE_OCI ?= $(BIN_DIR)/weighstation-image.tar
IMAGE_OCI_TAG ?= ghcr.io/weighstation/weighstation:$(VERSION)
# Where the image has it is where Go looks first (Debian's path); on
# another distribution, name its bundle.
IMAGE_OCI_CA_BUNDLE ?= /etc/ssl/certs/ca-certificates.crt
# The end-to-end tests' images (image-oci-e2e), ready for `ctr images import`.
IMAGE_OCI_E2E_DIR ?= $(BIN_DIR)/e2e-images
# The packer, built for this machine whatever GOOS and GOARCH say.
OCIIMAGE = GOOS= GOARCH= $(GO) run ./build/ociimage -arch $$($(GO) env GOARCH)
# A static build of one command for the images (no libc there).
static_build = CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $(2) $(1)

image-oci image-oci-e2e: export GOOS := linux

.PHONY: image-oci
image-oci: binaries ## Pack the image (as `make image`: both binaries, non-root, the OCI labels) into IMAGE_OCI, tagged IMAGE_OCI_TAG, without docker or a registry: empty base, /etc/passwd, IMAGE_OCI_CA_BUNDLE; for `ctr -n k8s.io images import` (image-oci-e2e: the end-to-end tests' images).
	@if [ ! -f "$(IMAGE_OCI_CA_BUNDLE)" ]; then \
	  echo "make image-oci: no CA bundle at $(IMAGE_OCI_CA_BUNDLE) (install ca-certificates, or name the bundle with IMAGE_OCI_CA_BUNDLE=...)" >&2; exit 1; fi
	mkdir -p $(dir $(IMAGE_OCI))
	$(OCIIMAGE) -out $(IMAGE_OCI) -tag $(IMAGE_OCI_TAG) \
	  -file $(BIN_DIR)/weighstation:/weighstation:0755 \
	  -file $(BIN_DIR)/weighstation-sidecar:/weighstation-sidecar:0755 \
	  -file $(IMAGE_OCI_CA_BUNDLE):/etc/ssl/certs/ca-certificates.crt:0644 \
	  -passwd -user 65532:65532 -entrypoint /weighstation \
	  -label org.opencontainers.image.title=weighstation \
	  -label "org.opencontainers.image.description=A Kubernetes-native NATS mesh: the weighstation operator, broker and sidecar" \
	  -label org.opencontainers.image.url=https://github.com/weighstation/weighstation \
	  -label org.opencontainers.image.source=https://github.com/weighstation/weighstation \
	  -label org.opencontainers.image.version=$(VERSION) \
	  -label org.opencontainers.image.revision=$$(git rev-parse HEAD 2>/dev/null)

.PHONY: image-oci-e2e
image-oci-e2e: ## Pack the end-to-end tests' images into IMAGE_OCI_E2E_DIR, as image-oci does: pause.tar (registry.k8s.io/pause:3.10, test/e2e/pause), demo-apps.tar (weighstation.local/demo-apps:e2e, demo/apps) and, once test/e2e/probe exists, probe.tar (weighstation.local/e2e-probe:e2e).
	mkdir -p $(IMAGE_OCI_E2E_DIR)/bin
	$(call static_build,./test/e2e/pause,$(IMAGE_OCI_E2E_DIR)/bin/pause)
	$(OCIIMAGE) -out $(IMAGE_OCI_E2E_DIR)/pause.tar -tag registry.k8s.io/pause:3.10 \
	  -file $(IMAGE_OCI_E2E_DIR)/bin/pause:/pause:0755 -user 65535:65535 -entrypoint /pause
	$(call static_build,./demo/apps,$(IMAGE_OCI_E2E_DIR)/bin/apps)
	$(OCIIMAGE) -out $(IMAGE_OCI_E2E_DIR)/demo-apps.tar -tag weighstation.local/demo-apps:e2e \
	  -file $(IMAGE_OCI_E2E_DIR)/bin/apps:/apps:0755 -passwd -user 65532:65532 -entrypoint /apps
ifneq ($(wildcard test/e2e/probe/*.go),)
	$(call static_build,./test/e2e/probe,$(IMAGE_OCI_E2E_DIR)/bin/probe)
	$(OCIIMAGE) -out $(IMAGE_OCI_E2E_DIR)/probe.tar -tag weighstation.local/e2e-probe:e2e \
	  -file $(IMAGE_OCI_E2E_DIR)/bin/probe:/probe:0755 -passwd -user 65532:65532 -entrypoint /probe
endif

.PHONY: bench-sidecar
bench-sidecar: build ## Open-loop end to end: two sidecars vs direct, 5 configurations, separate processes (BENCH_DURATION per run, BENCH_ROUNDS; BENCH_DURATION=5s for a quick run); BASE=<commit> adds two sidecars of that commit (built in a worktree), interleaved, and compares the builds' CPU per message and p50.
	go build -o bin/tcprelay ./test/bench/tcprelay
	@base=; if [ -n "$(BASE)" ]; then hack/build-base-sidecar.sh "$(BASE)" bin/base/weighstation-sidecar && base="-base-sidecar-bin bin/base/weighstation-sidecar"; fi; \
	set -x; go run ./test/bench/sidecar -bin bin/weighstation -sidecar-bin bin/weighstation-sidecar -relay bin/tcprelay -duration $(BENCH_DURATION) -rounds $(BENCH_ROUNDS) -out bin/bench-sidecar $(BENCH_SIDECAR_FLAGS) $$base

.PHONY: profile-sidecar
profile-sidecar: build ## Where a message's time goes: CPU profiles of both sidecars under open-loop load (PROFILE_BIN, PROFILE_RATE 10000/s, 1 KiB, 34 s), split by what the time was spent on; raw profiles in bin/profile-sidecar/.
	$(GO) run ./test/bench/profilesidecar -bin $${PROFILE_BIN:-bin/weighstation} -rate $${PROFILE_RATE:-10000} -size 1024 -duration 34s -out bin/profile-sidecar

.PHONY: bench-sidecar-rss
bench-sidecar-rss: binaries ## Idle memory (VmRSS, RssAnon, RssFile) of the sidecar as `weighstation sidecar` and as weighstation-sidecar, the image's binaries, standalone on loopback (ROUNDS).
	$(GO) run ./test/bench/sidecarrss -bin-dir $(BIN_DIR) -rounds $${ROUNDS:-5}

.PHONY: bench-overload
bench-overload: build ## A publisher at 10x its quota and a socket-stalled consumer beside an essential one (BENCH_DURATION).
	go run ./test/bench/overload -bin bin/weighstation -duration $(BENCH_DURATION)

.PHONY: bench-propagation
bench-propagation: build envtest ## Kill switch PATCH to every sidecar's SetConfig: envtest apiserver, operator and N sidecars (own streams, tokens, TLS, source IPs) as separate processes; p99 vs the issue's targets, operator CPU per change (N=100,1000, CHANGES=20; FLOOD=1000: the changes again under 1,000 junk xDS calls a second, side by side, with TokenReviews, the Lease and the flood's own CPU; BENCH_PROPAGATION_FLAGS=-operator-args=... etc.).
	KUBEBUILDER_ASSETS=$(KUBEBUILDER_ASSETS) go run ./test/bench/propagation -bin bin/weighstation -n $${N:-100,1000} -changes $${CHANGES:-20} -flood $${FLOOD:-0} -out bin/bench-propagation $(BENCH_PROPAGATION_FLAGS)

.PHONY: bench-operator
bench-operator: build envtest ## What each change costs the operator: envtest apiserver, operator, and one simulated sidecar (own ADS stream, token, TLS) per pod; one namespace of 200 pods/300 Topics/300 Subscriptions, then 2,000/3,000/3,000, then 100 namespaces of 100/30/30 (10,000 sidecars, 10 streams per connection); reconciles, status writes, CPU, acks, bytes vs issue 11's targets (WORLD=small,large,cluster, REPEATS=5, SCALE=1 scales the large world; the operator under the chart's GOMEMLIMIT unless -go-memlimit; BENCH_OPERATOR_FLAGS=-profile etc.).
	KUBEBUILDER_ASSETS=$(KUBEBUILDER_ASSETS) go run ./test/bench/operator -bin bin/weighstation -world $${WORLD:-small,large,cluster} -repeats $${REPEATS:-5} -scale $${SCALE:-1} -out bin/bench-operator $(BENCH_OPERATOR_FLAGS)

.PHONY: bench-reports
bench-reports: build envtest ## What the sidecars' reports cost the operator: envtest apiserver, operator, and SIDECARS simulated sidecars (own xDS and Reports streams, token, TLS; sidecar/report's Reporter) in one namespace, 3 of its 300 Subscriptions each, a report every 10 s with 1,000-value histograms, one Subscription in ten moving; CPU per report, RSS, report writes per object per minute vs issue 12's targets (SIDECARS=1000, DURATION=3m after a warm-up, SAMPLES=fresh|repeat, BENCH_REPORTS_FLAGS=-profile etc.; GOMEMLIMIT from the chart).
	KUBEBUILDER_ASSETS=$(KUBEBUILDER_ASSETS) go run ./test/bench/reports -bin bin/weighstation -sidecars $(SIDECARS) -duration $(DURATION) -samples $(SAMPLES) -out bin/bench-reports $(BENCH_REPORTS_FLAGS)

.PHONY: demo
demo: build envtest ## The mesh end to end on this machine in under five minutes: control plane + chart (helm), operator, broker, three pods' sidecars and apps, load, live status, kill switches, refusals; writes demo/report.html and leaves nothing running (DEMO_FLAGS=-short: shorter load).
	KUBEBUILDER_ASSETS=$(KUBEBUILDER_ASSETS) $(GO) run ./demo -bin bin/weighstation $(DEMO_FLAGS)

.PHONY: fuzz-matcher
fuzz-matcher: ## Fuzz subject validation, differential operation sequences and cache invalidation (FUZZTIME each).
	$(GO) test -run '^$$' -fuzz '^FuzzValidate$$' -fuzztime $${FUZZTIME:-30s} ./matcher/
	$(GO) test -run '^$$' -fuzz '^FuzzDifferential$$' -fuzztime $${FUZZTIME:-30s} ./matcher/
	$(GO) test -run '^$$' -fuzz '^FuzzCacheInvalidation$$' -fuzztime $${FUZZTIME:-30s} ./matcher/

.PHONY: fuzz-protocol
fuzz-protocol: ## Fuzz the sidecar's NATS protocol reader (FUZZTIME).
	$(GO) test -run '^$$' -fuzz '^FuzzReader$$' -fuzztime $${FUZZTIME:-30s} ./sidecar/protocol/

.PHONY: generate
generate: $(CONTROLLER_GEN) $(BUF) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC) ## Regenerate deepcopy code, CRDs, RBAC, the chart's CRD and RBAC templates and protobuf Go code (api/**/*.pb.go); `make test` fails if this changes anything.
	$(CONTROLLER_GEN) object paths=./api/...
	$(CONTROLLER_GEN) crd rbac:roleName=weighstation-operator paths=./api/... paths=./controllers/... \
	  output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	# The chart's CRDs and RBAC, from config/ (never edited by hand).
	$(GO) run ./hack/chartgen -config config -out charts/weighstation/templates/generated
	cd tools && $(GO) mod tidy
	ln -sf $(notdir $(PROTOC_GEN_GO)) bin/protoc-gen-go
	ln -sf $(notdir $(PROTOC_GEN_GO_GRPC)) bin/protoc-gen-go-grpc
	$(BUF) generate
	$(GO) mod tidy

$(CONTROLLER_GEN):
	mkdir -p bin/tmp-controller-gen
	GOBIN=$(CURDIR)/bin/tmp-controller-gen $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)
	mv bin/tmp-controller-gen/controller-gen $@ && rmdir bin/tmp-controller-gen

# Built from tools/go.mod (-mod=readonly: fails rather than change it).
$(BUF): tools/go.mod tools/go.sum
	mkdir -p bin
	cd tools && $(GO) build -mod=readonly -o $@.tmp github.com/bufbuild/buf/cmd/buf
	mv $@.tmp $@

$(PROTOC_GEN_GO): tools/go.mod tools/go.sum
	mkdir -p bin
	cd tools && $(GO) build -mod=readonly -o $@.tmp google.golang.org/protobuf/cmd/protoc-gen-go
	mv $@.tmp $@

$(PROTOC_GEN_GO_GRPC): tools/go.mod tools/go.sum
	mkdir -p bin
	cd tools && $(GO) build -mod=readonly -o $@.tmp google.golang.org/grpc/cmd/protoc-gen-go-grpc
	mv $@.tmp $@

.PHONY: test-chart
test-chart: envtest ## helm lint, the chart's rendering, and install/upgrade/uninstall with bin/helm into the envtest apiserver.
	KUBEBUILDER_ASSETS=$(KUBEBUILDER_ASSETS) PATH=$(CURDIR)/bin:$$PATH $(GO) test -count=1 ./test/chart/

.PHONY: lint
lint: ## gofmt and go vet.
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet ./...
