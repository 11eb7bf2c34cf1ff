#!/usr/bin/env sh
# Installs the Agent Protocol client the tests drive `autothread serve` with, one nobody here
# wrote: the Python package agent-protocol-client 1.1.0 (from the Python package registry), in
# its own virtual environment under target/ap-venv, on Python 3.11 with the pydantic and urllib3
# majors it was written for. Prints the line to export. Run again, it only checks the
# installation.
set -eu
cd "$(dirname "$0")/.."
VENV="${AP_VENV:-target/ap-venv}"
PYTHON="$VENV/bin/python"
if ! "$PYTHON" -c "import agent_protocol_client" >/dev/null 2>&1; then
  PY311="$(command -v python3.11 || true)"
  if [ -z "$PY311" ]; then
    echo "python3.11 is not installed; agent-protocol-client 1.1.0 needs it" >&2
    exit 1
  fi
  rm -rf "$VENV"
  "$PY311" -m venv "$VENV" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check \
    "agent-protocol-client==1.1.0" "pydantic<2" "urllib3<2" >&2
fi
echo "AGENT_PROTOCOL_PYTHON=$(cd "$(dirname "$PYTHON")" && pwd)/python"
