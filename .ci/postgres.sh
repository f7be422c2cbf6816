#!/usr/bin/env bash
# Start a PostgreSQL cluster of ckheur's own on a free local port, for the database tests.
# Run as root (it installs Debian's postgresql when missing; the server runs as the postgres user):
#     eval "$(sudo bash .ci/postgres.sh)"
# It prints the two variables the tests read: CKHEUR_TEST_PG_URL (no password in it) and
# PGPASSWORD (a random one, taken from the environment as libpq does). A rerun replaces the cluster.
set -euo pipefail
name=${CKHEUR_PG_CLUSTER:-ckheur_test}
say() { echo "postgres.sh: $*" >&2; }
t0=$(date +%s)
if ! command -v pg_createcluster >/dev/null 2>&1; then
  say "installing postgresql (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends postgresql >/dev/null
fi
ver=$(ls /usr/lib/postgresql | sort -n | tail -1)
pg_dropcluster --stop "$ver" "$name" >/dev/null 2>&1 || true
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pw=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
pg_createcluster "$ver" "$name" -p "$port" -- --auth-local=peer --auth-host=scram-sha-256 >/dev/null
# Small and fast: a test cluster, not a durable one (fsync off; its data is thrown away).
cat >> "/etc/postgresql/$ver/$name/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
CONF
pg_ctlcluster "$ver" "$name" start
runuser -u postgres -- psql -q -p "$port" -v ON_ERROR_STOP=1 \
  -c "CREATE ROLE ckheur LOGIN PASSWORD '$pw'" -c "CREATE DATABASE ckheur OWNER ckheur" >/dev/null
say "PostgreSQL $ver cluster $name on 127.0.0.1:$port in $(( $(date +%s) - t0 )) s"
echo "export CKHEUR_TEST_PG_URL=postgresql://ckheur@127.0.0.1:$port/ckheur"
echo "export PGPASSWORD=$pw"
echo "export CKHEUR_TEST_PG_CLUSTER='$ver $name'"
