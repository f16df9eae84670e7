#!/usr/bin/env bash
# Start (or reuse) a throwaway PostgreSQL server on 127.0.0.1 for the ledger tests.
#
#   eval "$(scripts/postgres_for_tests.sh)"        # exports DPRAG_TEST_POSTGRES_DSN
#   scripts/postgres_for_tests.sh stop             # stops it and deletes its data
#
# Installs the Debian `postgresql` package with apt-get when no server binaries are
# found, then runs initdb in a temp dir ($DPRAG_PG_DIR, default /tmp/dprag-test-postgres)
# as a non-root user (`postgres` when run as root), starts it on a free loopback port
# with trust authentication (loopback only, test data only), creates the database
# `dprag_test`, and prints one line on stdout:
#   export DPRAG_TEST_POSTGRES_DSN=postgresql://dprag@127.0.0.1:PORT/dprag_test
# Idempotent: a second call reuses the running server. Progress goes to stderr.
set -euo pipefail

PGROOT=${DPRAG_PG_DIR:-${TMPDIR:-/tmp}/dprag-test-postgres}
DB=dprag_test
PGUSER_NAME=dprag

log() { echo "postgres_for_tests: $*" >&2; }

find_bin() {
    local d
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    if [[ -n "$d" && -x "$d/initdb" ]]; then
        echo "$d"
    elif command -v initdb >/dev/null 2>&1; then
        dirname "$(command -v initdb)"
    fi
}

BIN=$(find_bin)
if [[ -z "$BIN" ]]; then
    log "PostgreSQL server not found: installing the Debian package"
    SUDO=""
    if [[ $(id -u) -ne 0 ]]; then SUDO="sudo -n"; fi
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        postgresql >&2
    BIN=$(find_bin)
    [[ -n "$BIN" ]] || { log "installation failed: no initdb"; exit 1; }
fi

# Run server commands as a non-root user.
if [[ $(id -u) -eq 0 ]]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    as_owner() { runuser -u postgres -- "$@"; }
    OWNER=postgres
else
    as_owner() { "$@"; }
    OWNER=$(id -un)
fi

DATA="$PGROOT/data"
PORTFILE="$PGROOT/port"

if [[ "${1:-}" == "stop" ]]; then
    if [[ -f "$DATA/postmaster.pid" ]]; then
        as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >&2 || true
    fi
    rm -rf "$PGROOT"
    log "stopped"
    exit 0
fi

running() {
    [[ -f "$PORTFILE" ]] && as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if ! running; then
    rm -rf "$PGROOT"
    mkdir -p "$PGROOT"
    chown "$OWNER" "$PGROOT"
    chmod 700 "$PGROOT"
    log "initdb in $DATA"
    as_owner "$BIN/initdb" -D "$DATA" -U "$PGUSER_NAME" -A trust -E UTF8 --no-sync >/dev/null
    PORT=""
    for _ in $(seq 1 50); do
        candidate=$((20000 + RANDOM % 40000))
        if port_free "$candidate"; then PORT=$candidate; break; fi
    done
    [[ -n "$PORT" ]] || { log "no free port found"; exit 1; }
    as_owner "$BIN/pg_ctl" -D "$DATA" -l "$PGROOT/server.log" -w -t 60 \
        -o "-p $PORT -k $PGROOT -c listen_addresses=127.0.0.1 -c max_connections=200" \
        start >&2
    echo "$PORT" >"$PORTFILE"
    log "started on 127.0.0.1:$PORT"
fi

PORT=$(cat "$PORTFILE")
PSQL=("$BIN/psql" -h 127.0.0.1 -p "$PORT" -U "$PGUSER_NAME" -d postgres -v ON_ERROR_STOP=1 -tAq)
if [[ -z $("${PSQL[@]}" -c "SELECT 1 FROM pg_database WHERE datname = '$DB'") ]]; then
    "${PSQL[@]}" -c "CREATE DATABASE $DB" >&2
fi
echo "export DPRAG_TEST_POSTGRES_DSN=postgresql://$PGUSER_NAME@127.0.0.1:$PORT/$DB"
