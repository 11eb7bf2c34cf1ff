# syntax=docker/dockerfile:1
#
# autothread in two stages: a Rust toolchain image compiles the release binary, and a slim Debian
# image runs it as an unprivileged user with its store on a volume at /data.
#
#   docker build -t autothread .
#   docker run --rm -it -e OPENAI_API_KEY -v autothread-data:/data autothread console --task "…"

# The toolchain is pinned so that a rebuild months from now uses the same compiler; it matches
# rust-toolchain.toml. (.ci/run replays this stage's COPY and RUN steps on the host, so a file or
# target this stage misses fails CI: see scripts/replay-docker-build.sh.)
ARG RUST_VERSION=1.95.0

FROM rust:${RUST_VERSION}-slim-bookworm AS build

# TLS is rustls only, so no OpenSSL headers or pkg-config are needed. reqwest's rustls backend pulls
# in aws-lc-rs (and ring comes in through other crates), which compile C code: the slim image's gcc
# is not the full toolchain, and some aws-lc-sys builds drive CMake, so both are installed to be safe.
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src

# Dependencies change far less often than our code, so they get their own layer. Cargo needs every
# target named in Cargo.toml to exist before it will build anything; stub-targets.sh reads the
# targets from the manifest and writes an empty stand-in for each, so a new target can't be missed.
# Building the stand-ins compiles all the dependencies.
COPY Cargo.toml Cargo.lock rust-toolchain.toml ./
COPY crates/core/Cargo.toml ./crates/core/
COPY scripts/stub-targets.sh ./scripts/
RUN sh scripts/stub-targets.sh \
    && sh scripts/stub-targets.sh crates/core/Cargo.toml \
    && cargo build --release --locked --bin autothread \
    && rm -rf src benches crates/core/src

# The real sources. migrations/ must be present at build time because src/store/migrate.rs embeds
# the migration files with include_str!. benches/ is copied because Cargo.toml names the bench
# targets; the benches themselves are not compiled here. bot.toml.example is only read by config.rs's tests,
# not by the release binary, but it is small and keeps the source tree complete.
COPY src ./src
COPY crates ./crates
COPY migrations ./migrations
COPY benches ./benches
COPY bot.toml.example ./

# COPY keeps the files' original modification times, which can be older than the stand-ins built
# above; touching the crate roots makes Cargo see the change and compile the real code.
RUN touch src/main.rs src/lib.rs crates/core/src/lib.rs \
    && cargo build --release --locked --bin autothread

FROM debian:bookworm-slim

# rustls checks server certificates against the operating system's trust store (through
# rustls-platform-verifier), so the CA bundle is needed; python3 is what agents' code runs on, in
# the bot's sandbox.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates python3 \
    && rm -rf /var/lib/apt/lists/*

# The agent runs model-chosen commands, so it runs without root. /data is created and handed to that
# user before it is declared a volume, so a fresh named volume starts out owned by the user too.
RUN groupadd --system --gid 10001 autothread \
    && useradd --system --uid 10001 --gid 10001 --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin autothread \
    && mkdir -p /data \
    && chown 10001:10001 /data

COPY --from=build /src/target/release/autothread /usr/local/bin/autothread

# The store (agents, history, workspaces) lives in /data; mount a volume there to keep it across
# containers. AUTOTHREAD_DATA_DIR overrides the platform data directory the binary would otherwise pick.
ENV AUTOTHREAD_DATA_DIR=/data
# /healthz, /readyz and /metrics listen on the container's network (not only its loopback) so that
# an orchestrator or Prometheus can reach them; publish the port only where they should.
ENV AUTOTHREAD_OPS_LISTEN=0.0.0.0:9464
EXPOSE 9464
VOLUME /data
WORKDIR /data
USER 10001:10001

# `autothread health` asks the listener's /healthz (no curl in this image).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["autothread", "health"]

ENTRYPOINT ["autothread"]
CMD ["--help"]
