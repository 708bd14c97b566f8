# syntax=docker/dockerfile:1
#
# One image with the three binaries (syncer, evaluator, api) at
# /usr/local/bin; a deployment picks its binary with `command`. Why one image
# and this base: docs/deploy.md. deploy/binaries_test.go builds the binaries
# with the same `go build` line as below and checks that they are static.
#
#   docker build -t lookout:dev .
#   docker run --rm lookout:dev syncer --help

ARG GO_VERSION=1.26
# distroless/static: CA certificates, /etc/passwd with nonroot (65532),
# tzdata (cron timezones), no shell, no package manager. For `command`
# sinks, which run a program, build FROM a base that has the program:
#   docker build --build-arg BASE=debian:bookworm-slim .
ARG BASE=gcr.io/distroless/static-debian12:nonroot

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG BINARIES="syncer evaluator api"
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    for b in $BINARIES; do \
      CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -o /out/$b ./cmd/$b || exit 1; \
    done

FROM ${BASE}
COPY --from=build /out/ /usr/local/bin/
# The example configuration, so that `docker run IMAGE syncer check` works;
# deployments mount their own directory at /etc/lookout/config.
COPY examples/config /etc/lookout/config
COPY examples/data /etc/lookout/data
ENV LOOKOUT_CONFIG=/etc/lookout/config \
    LOOKOUT_LOG_FORMAT=json
# Numeric, so that Kubernetes' runAsNonRoot can verify it on any base.
USER 65532:65532
# syncer 9464, evaluator 9465, api 9466: /metrics, /healthz, /readyz (and
# the api's /v1) once `run --listen` names an address on every interface.
EXPOSE 9464 9465 9466
CMD ["/usr/local/bin/syncer", "--help"]
