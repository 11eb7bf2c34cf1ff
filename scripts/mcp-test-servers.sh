#!/usr/bin/env sh
# Installs the MCP servers the tests speak to, ones nobody here wrote: the reference time server
# (mcp-server-time, from the Python package registry) into target/mcp-venv, and the protocol's
# reference server (@modelcontextprotocol/server-everything) and a stateful one
# (@modelcontextprotocol/server-memory), from the npm registry, into target/mcp-npm. Versions are
# pinned. Prints the lines to export. Run again, it only checks the installation.
set -eu
cd "$(dirname "$0")/.."
VENV="${MCP_VENV:-target/mcp-venv}"
SERVER="$VENV/bin/mcp-server-time"
if [ ! -x "$SERVER" ]; then
  python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "mcp-server-time==2026.10.19" >&2
fi
echo "MCP_TIME_SERVER=$(cd "$(dirname "$SERVER")" && pwd)/mcp-server-time"

NPM_PREFIX="${MCP_NPM_PREFIX:-target/mcp-npm}"
EVERYTHING_VERSION=2026.8.31
MEMORY_VERSION=2026.8.31
BIN="$NPM_PREFIX/node_modules/.bin"
if [ ! -x "$BIN/mcp-server-everything" ] || [ ! -x "$BIN/mcp-server-memory" ]; then
  mkdir -p "$NPM_PREFIX"
  # No audit, funding notice or update check: only the two packages and what they need.
  npm install --prefix "$NPM_PREFIX" --no-audit --no-fund --no-update-notifier --loglevel=error \
    "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" \
    "@modelcontextprotocol/server-memory@$MEMORY_VERSION" >&2
fi
BIN_DIR="$(cd "$BIN" && pwd)"
echo "MCP_EVERYTHING_SERVER=$BIN_DIR/mcp-server-everything"
echo "MCP_MEMORY_SERVER=$BIN_DIR/mcp-server-memory"
