# Weir: build the release binary, then run it on a slim image.
# RocksDB is compiled from source (bindgen needs libclang); librdkafka too (cmake-free
# build, needs a C toolchain and zlib).
FROM rust:1-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends libclang-dev clang zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --bin weir

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates zlib1g libstdc++6 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/weir /usr/local/bin/weir
VOLUME /data
# Postgres wire protocol, Prometheus metrics.
EXPOSE 6543 9249
# The container listens on all interfaces, which Weir refuses without a password
# unless told explicitly. The opt-in below keeps `docker run` working out of the box
# for local use; anywhere the port is reachable by others, run with a password
# instead (`docker run -e WEIR_PASSWORD=...`, or `auth.password` in a mounted
# weir.toml: clients then authenticate with SCRAM-SHA-256) and consider TLS
# (`[tls] cert-file` / `key-file`).
ENTRYPOINT ["weir", "--listen", "0.0.0.0:6543", "--data-dir", "/data", "--allow-unauthenticated-remote"]
