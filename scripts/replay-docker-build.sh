#!/bin/sh
# Replays the Dockerfile's build stage on this machine, without Docker: a fresh directory gets
# exactly the files the stage COPYs, and the stage's RUN steps run there in order. A file or a
# build target the Dockerfile forgets to copy fails here as it would in `docker build`.
#
# Two things differ from a real image build, on purpose:
# - RUN steps that install system packages (apt-get) are skipped: this machine has its toolchain.
# - `--release` is dropped from the cargo commands, and the build goes to the repository's own
#   target directory: the dependencies then compiled are the very ones `cargo test` uses next
#   (Cargo.toml keeps the test-only features off them), so CI compiles them once instead of twice.
#   The same files and targets are checked; the optimiser is not what this replay is about.
# Usage: scripts/replay-docker-build.sh [WORKDIR]   (CARGO_TARGET_DIR is honoured)
set -eu
cd "$(dirname "$0")/.."
REPO=$(pwd)
WORK=${1:-${TMPDIR:-/tmp}/autothread-docker-replay}
rm -rf "$WORK"
mkdir -p "$WORK"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target}"

# The build stage: from its FROM line to the next FROM, with continued lines joined.
STEPS="$WORK.steps"
awk '
  /^FROM .* AS build/ { inside = 1; next }
  /^FROM / { inside = 0 }
  !inside || /^[[:space:]]*#/ || /^[[:space:]]*$/ { next }
  { line = line $0 }
  /\\$/ { sub(/\\$/, "", line); next }
  { print line; line = "" }
' Dockerfile > "$STEPS"

copies=0; runs=0
while IFS= read -r step; do
  instruction=${step%% *}
  args=${step#* }
  case "$instruction" in
    COPY)
      case "$args" in --*) echo "replay: COPY with a flag is not supported: $step" >&2; exit 1 ;; esac
      # shellcheck disable=SC2086
      set -- $args
      dest=$(eval echo "\${$#}")
      sources=""
      while [ $# -gt 1 ]; do sources="$sources $1"; shift; done
      case "$dest" in */) mkdir -p "$WORK/$dest" ;; *) [ "$(echo "$sources" | wc -w)" -gt 1 ] && mkdir -p "$WORK/$dest" ;; esac
      for src in $sources; do
        [ -e "$REPO/$src" ] || { echo "replay: the Dockerfile copies $src, which does not exist" >&2; exit 1; }
        mkdir -p "$(dirname "$WORK/$dest")"
        if [ -d "$REPO/$src" ]; then
          # Docker copies a directory's contents into the destination, merging with what is there.
          mkdir -p "$WORK/$dest" && cp -a "$REPO/$src/." "$WORK/$dest/"
        else
          cp -a "$REPO/$src" "$WORK/$dest"
        fi
      done
      copies=$((copies + 1))
      ;;
    RUN)
      case "$args" in
        apt-get*) echo "replay: skipped (system packages): ${args%%&&*}" ;;
        *)
          args=$(printf '%s\n' "$args" | sed 's/ --release\b//g')
          echo "replay: RUN $args"
          (cd "$WORK" && sh -ec "$args")
          runs=$((runs + 1))
          ;;
      esac
      ;;
    WORKDIR|ARG|ENV|LABEL) ;;
    *) echo "replay: the build stage uses $instruction, which this replay does not know" >&2; exit 1 ;;
  esac
done < "$STEPS"
rm -f "$STEPS"
[ -x "$CARGO_TARGET_DIR/debug/autothread" ] || { echo "replay: no binary was built" >&2; exit 1; }
"$CARGO_TARGET_DIR/debug/autothread" --version
echo "replay: the Dockerfile's build stage builds ($copies COPY and $runs RUN steps replayed)"
