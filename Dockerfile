# Multi-stage build: every Flow binary in one small runtime image; docker-compose picks the
# command per service.
#
# Dependencies are cached with cargo-chef: `prepare` reduces the workspace to its manifests and
# lock file (recipe.json), `cook` builds only the dependencies from it in a layer of its own, so a
# change to Flow's sources rebuilds Flow alone. Unlike BuildKit cache mounts, that layer is an
# ordinary image layer: it survives `docker builder prune` and travels with `--cache-to`/
# `--cache-from` to CI runners that start empty.
FROM rust:1.95-bookworm AS chef
RUN cargo install --locked cargo-chef --version 0.1.76
WORKDIR /src

FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS build
COPY --from=planner /src/recipe.json recipe.json
# The C build flags the dependencies are built with (mimalloc's arena default) come with them.
COPY .cargo .cargo
RUN cargo chef cook --release --locked --recipe-path recipe.json
COPY . .
RUN cargo build --release --locked --bins \
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
# The image's own probe (no curl or shell tricks needed): compose overrides the URL per service.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=6 \
  CMD ["flowctl", "health", "http://127.0.0.1:8080/readyz"]
CMD ["flow-api"]
