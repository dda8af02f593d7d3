# Build: docker build -t dwara .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/dwara ./cmd/dwara

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/dwara /usr/local/bin/dwara
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/dwara"]
CMD ["serve", "--listen", "0.0.0.0:8080", "--admin-listen", "0.0.0.0:9090"]
