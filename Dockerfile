# syntax=docker/dockerfile:1
# retry-scheduler: one binary, modes all | worker | bridge (see internal/config/).
#
#   docker build -t retry-scheduler \
#     --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg SOURCE=https://example.com/your/retry-scheduler .
#
# VERSION and REVISION are stamped into the binary (github.com/retry-scheduler/retry-scheduler/buildinfo): they are what
# `retry-scheduler -version`, the retry_scheduler_build_info metric and the default
# SERVICE_VERSION say, and the image's labels. .dockerignore keeps .git out of the context, so
# nothing can be read from git in here: without the arguments the image says "dev" and
# "unknown".

# Exactly go.mod's Go (internal/buildinfo/dockerfile_test.go checks); GOTOOLCHAIN=local makes a
# mismatch fail the build instead of downloading another toolchain.
FROM golang:1.26.8-bookworm AS build
ENV GOTOOLCHAIN=local CGO_ENABLED=0
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
ARG VERSION=
ARG REVISION=
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath \
      -ldflags "-s -w -X github.com/retry-scheduler/retry-scheduler/internal/buildinfo.version=${VERSION} -X github.com/retry-scheduler/retry-scheduler/internal/buildinfo.revision=${REVISION}" \
      -o /out/retry-scheduler ./cmd/retry-scheduler

# A static binary needs no libc: distroless static, its nonroot variant. Pinned by tag, not
# digest: a digest that could not be checked against the registry when this was written is
# worse than the tag. Pin the digest where images are built and verified.
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=
ARG REVISION=
ARG SOURCE=
LABEL org.opencontainers.image.title="retry-scheduler"
LABEL org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}"
COPY --from=build /out/retry-scheduler /retry-scheduler
# distroless's nonroot user, by number, so that Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
EXPOSE 8086
ENTRYPOINT ["/retry-scheduler"]
CMD ["all"]
