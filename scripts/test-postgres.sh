#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests: Debian's postgresql, initdb into DIR, listening
# on loopback only, on a free port, trust authentication (nothing but this machine reaches it).
#
#   scripts/test-postgres.sh start DIR   prints the database URL once the server accepts connections
#   scripts/test-postgres.sh stop DIR    stops it (the tests remove DIR)
#
# As root the server runs as the postgres user, which PostgreSQL requires: DIR must then be
# reachable by that user (e.g. directly under /tmp).
set -euo pipefail
command=${1:?usage: $0 start|stop DIR}
dir=${2:?usage: $0 start|stop DIR}
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
  echo "$0: PostgreSQL's server is not installed (Debian package postgresql; make setup installs it)" >&2
  exit 1
fi
as_owner=()
if [ "$(id -u)" -eq 0 ]; then as_owner=(runuser -u postgres --); fi

case $command in
  start)
    mkdir -p "$dir"
    [ ${#as_owner[@]} -eq 0 ] || chown postgres "$dir"
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "${as_owner[@]}" "$bin/initdb" -D "$dir/data" -A trust -U trainscope -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 ||
      { cat "$dir/initdb.log" >&2; exit 1; }
    # fsync off: a test database never outlives a crash of this machine.
    "${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
      start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
    echo "postgresql://trainscope@127.0.0.1:$port/postgres"
    ;;
  stop)
    [ -d "$dir/data" ] && "${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    ;;
  restart)
    "${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -m fast -w restart >/dev/null
    ;;
  *)
    echo "usage: $0 start|stop|restart DIR" >&2
    exit 2
    ;;
esac
