# Build: docker build -t dwara --build-arg VERSION="$(git describe --always --dirty)" .
# (docker compose builds it too: docker-compose.yml.)
#
# Base images are pinned to exact tags; the Go toolchain's is go.mod's go
# version (deploy/compose's TestDockerfile checks both). They are not pinned
# by digest yet: the machine this was written on reaches no container
# registry, so no digest could be looked up or checked. Where one is
# reachable, pin them as NAME:TAG@sha256:DIGEST with the digest that
#   docker buildx imagetools inspect golang:1.26.8-bookworm
#   docker buildx imagetools inspect gcr.io/distroless/static-debian12:nonroot
# print, and keep the tag for the reader.
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The version `dwara version` and /healthz report (make passes git describe).
ARG VERSION=devel
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=${VERSION}" -o /out/dwara ./cmd/dwara

# distroless: no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/dwara /usr/local/bin/dwara
# The image's nonroot user, said here rather than left to the base image's
# default, and numeric so that Kubernetes' runAsNonRoot can check it.
USER 65532:65532
EXPOSE 8080 9090
# No shell or curl in the image: dwara checks serve's /healthz itself. A
# container that runs `dwara gateway` checks its --metrics-listen instead
# (docker run --health-cmd, or healthcheck: in compose).
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
	CMD ["/usr/local/bin/dwara", "health", "--url", "http://127.0.0.1:9090/healthz", "--timeout", "2s"]
ENTRYPOINT ["/usr/local/bin/dwara"]
CMD ["serve", "--listen", "0.0.0.0:8080", "--admin-listen", "0.0.0.0:9090"]
