# The weighstation image: one image, two binaries.
#
#   /weighstation          operator, broker, bench (the entrypoint: the
#                          chart gives the subcommand as args)
#   /weighstation-sidecar  the sidecar beside each application: a binary of
#                          its own, without the Kubernetes libraries
#
# `make image` builds it (docker or podman) with VERSION and REVISION from
# git; the context has no .git (.dockerignore), so they come in as build
# arguments. The build stage runs `make binaries`, the same target a test
# (test/image) runs and checks outside any container engine.

FROM golang:1.26 AS build
WORKDIR /src
# The modules in a layer of their own: rebuilt when go.mod or go.sum
# change, not at every source change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=unknown
RUN make binaries VERSION=$VERSION BIN_DIR=/out

# Static binaries need no libc: distroless static has CA certificates,
# /etc/passwd with the nonroot user, tzdata, and nothing to run a shell.
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=unknown
ARG REVISION=
LABEL org.opencontainers.image.title="weighstation" \
      org.opencontainers.image.description="A Kubernetes-native NATS mesh: the weighstation operator, broker and sidecar" \
      org.opencontainers.image.url="https://github.com/weighstation/weighstation" \
      org.opencontainers.image.source="https://github.com/weighstation/weighstation" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION"
COPY --from=build /out/weighstation /out/weighstation-sidecar /
# Numeric, so that the kubelet can check runAsNonRoot (the chart's pods run
# as 65532 too).
USER 65532:65532
ENTRYPOINT ["/weighstation"]
