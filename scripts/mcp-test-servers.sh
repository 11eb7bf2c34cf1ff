#!/usr/bin/env sh
# Installs the MCP server the tests speak to, one nobody here wrote: the reference time server
# (mcp-server-time, from the Python package registry), into target/mcp-venv. Prints the line to
# export. Run again, it only checks the installation.
set -eu
cd "$(dirname "$0")/.."
VENV="${MCP_VENV:-target/mcp-venv}"
SERVER="$VENV/bin/mcp-server-time"
if [ ! -x "$SERVER" ]; then
  python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "mcp-server-time==2026.10.19" >&2
fi
echo "MCP_TIME_SERVER=$(cd "$(dirname "$SERVER")" && pwd)/mcp-server-time"
