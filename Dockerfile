# Multi-stage build: every Flow binary in one small runtime image; docker-compose picks the
# command per service.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bins \
 && mkdir -p /out \
 && for bin in flow-api assign-worker report-worker scheduler outbox-relay webhook-worker flowctl; do cp "target/release/$bin" /out/; done

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/flow --create-home flow \
 && mkdir -p /var/lib/flow/exports \
 && chown flow:flow /var/lib/flow/exports
COPY --from=build /out/ /usr/local/bin/
USER flow
WORKDIR /var/lib/flow
ENV LOG_FORMAT=json
EXPOSE 8080
CMD ["flow-api"]
