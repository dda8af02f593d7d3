#!/usr/bin/env bash
# Prints the URL of a PostgreSQL server for database $1 (default "dwara"),
# finding or starting one (README.md, "Start here"; make run and make test
# call it):
#   1. DWARA_DATABASE_URL, when set, is printed as it is;
#   2. a server answering on 127.0.0.1:5432;
#   3. a private cluster under .dwara/pg (127.0.0.1:54329) made and started
#      with this machine's PostgreSQL binaries (run as the postgres user when
#      we are root);
#   4. otherwise it explains how to get one and fails.
# The database itself is created by dwara (serve/migrate) or the test helper.
# DWARA_STATE moves .dwara (the cluster's directory); DWARA_PG_PORT the
# private cluster's port; DWARA_PG_PRIVATE=1 skips 5432 and uses the
# private cluster. make stop (scripts/stop.sh) stops the private cluster.
set -euo pipefail
db=${1:-dwara}
root=$(cd "$(dirname "$0")/.." && pwd)

if [ -n "${DWARA_DATABASE_URL:-}" ]; then
	echo "$DWARA_DATABASE_URL"
	exit 0
fi

answers() { # host port
	if command -v pg_isready >/dev/null 2>&1; then
		pg_isready -q -h "$1" -p "$2" -t 2
	else
		timeout 2 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null
	fi
}

state=${DWARA_STATE:-$root/.dwara}
if [ "${DWARA_PG_PRIVATE:-}" != 1 ] && answers 127.0.0.1 5432; then
	echo "postgres://postgres@127.0.0.1:5432/$db?sslmode=disable"
	exit 0
fi

port=${DWARA_PG_PORT:-54329}
if answers 127.0.0.1 $port; then
	echo "postgres://postgres@127.0.0.1:$port/$db?sslmode=disable"
	exit 0
fi

bin=""
if command -v initdb >/dev/null 2>&1; then
	bin=$(dirname "$(command -v initdb)")
else
	bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
fi
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
	cat >&2 <<'MSG'
No PostgreSQL answers on 127.0.0.1:5432 and no PostgreSQL server binaries were
found to start a private one. Any of these works:
  - set DWARA_DATABASE_URL=postgres://user@host:5432/dwara
  - apt-get install -y postgresql   (then run this again)
  - docker run -d -p 127.0.0.1:5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:15.19-bookworm
MSG
	exit 1
fi

data="$state/pg"
as_pg() {
	if [ "$(id -u)" = 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}
mkdir -p "$state"
if [ ! -f "$data/PG_VERSION" ]; then
	mkdir -p "$data"
	[ "$(id -u)" = 0 ] && chown postgres "$data"
	as_pg "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 >"$state/initdb.log" 2>&1 || {
		cat "$state/initdb.log" >&2
		exit 1
	}
fi
as_pg "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 30 \
	-o "-c listen_addresses=127.0.0.1 -p $port -k /tmp" start >&2
echo "private PostgreSQL started under $data; it outlives make run: stop it with make stop" >&2
echo "postgres://postgres@127.0.0.1:$port/$db?sslmode=disable"
