# retry-scheduler: one binary, modes all | worker | bridge (see config/).
#   docker build -t retry-scheduler --build-arg VERSION=$(git describe --always) .

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/retry-scheduler ./cmd/retry-scheduler

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
ENV SERVICE_VERSION=${VERSION}
COPY --from=build /out/retry-scheduler /retry-scheduler
USER nonroot:nonroot
EXPOSE 8086
ENTRYPOINT ["/retry-scheduler"]
CMD ["all"]
