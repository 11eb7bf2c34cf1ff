#!/usr/bin/env sh
# Starts a PostgreSQL server for the store's tests on 127.0.0.1, from Debian's packages (installed
# with apt-get when they are missing and the script runs as root), in a cluster of its own under
# $PG_DIR, and prints the line to export: AUTOTHREAD_TEST_POSTGRES_URL=postgres://…
#   scripts/postgres-test-server.sh        start (a server already running there is stopped first)
#   scripts/postgres-test-server.sh stop   stop it, by the process id in its data folder
# The cluster is for tests only: its password is made up at each start, and it trades durability
# for speed (no fsync), which a test cannot tell apart.
set -eu
PG_DIR="${PG_DIR:-${TMPDIR:-/tmp}/autothread-postgres}"
DATA="$PG_DIR/data"

bindir() {
  for candidate in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$candidate/pg_ctl" ]; then echo "$candidate"; return 0; fi
  done
  return 1
}

# The server refuses to run as root, so as root it runs as the packages' own `postgres` user.
as_server_user() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

stop() {
  if BIN=$(bindir) && [ -f "$DATA/postmaster.pid" ]; then
    as_server_user "$BIN/pg_ctl" -D "$DATA" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
  fi
}

if [ "${1:-start}" = stop ]; then
  stop
  exit 0
fi

if ! BIN=$(bindir); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing PostgreSQL from Debian's packages" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql >&2 ||
      { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql >&2; }
  fi
  BIN=$(bindir) || { echo "PostgreSQL's server is not installed (apt-get install postgresql)" >&2; exit 1; }
fi

stop
rm -rf "$PG_DIR"
mkdir -p "$PG_DIR"
PASSWORD=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
printf '%s\n' "$PASSWORD" > "$PG_DIR/password"
if [ "$(id -u)" = 0 ]; then chown -R postgres "$PG_DIR"; fi
chmod 700 "$PG_DIR"
as_server_user "$BIN/initdb" -D "$DATA" -U autothread --pwfile="$PG_DIR/password" \
  --auth-local=scram-sha-256 --auth-host=scram-sha-256 -E UTF8 --no-instructions >"$PG_DIR/initdb.log" 2>&1 ||
  { cat "$PG_DIR/initdb.log" >&2; exit 1; }
rm -f "$PG_DIR/password"

# A free port on loopback, asked of the kernel; the server binds it a moment later.
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
as_server_user "$BIN/pg_ctl" -D "$DATA" -l "$PG_DIR/server.log" -w -t 60 \
  -o "-c listen_addresses=127.0.0.1 -p $PORT -c unix_socket_directories=$PG_DIR -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
  start >&2 || { tail -n 30 "$PG_DIR/server.log" >&2; exit 1; }
PGPASSWORD="$PASSWORD" "$BIN/createdb" -h 127.0.0.1 -p "$PORT" -U autothread autothread >&2
echo "AUTOTHREAD_TEST_POSTGRES_URL=postgres://autothread:$PASSWORD@127.0.0.1:$PORT/autothread"
