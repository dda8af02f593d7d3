#!/usr/bin/env bash
# make stop: stops what make run left running (README.md, "Start here"):
#   1. the dwara serve of make run, by the pid it recorded in .dwara/run.pid
#      (SIGTERM: it drains, then exits), when that process is still dwara;
#   2. the private PostgreSQL cluster under .dwara/pg that scripts/postgres.sh
#      started when nothing answered on 127.0.0.1:5432, when it runs.
# A PostgreSQL that was already running (the machine's, on 5432) is never
# touched. Stopping what is not running is not an error.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
state=${DWARA_STATE:-$root/.dwara} # as scripts/postgres.sh

pidfile="$state/run.pid"
if [ -f "$pidfile" ]; then
	pid=$(cat "$pidfile")
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q dwara "/proc/$pid/cmdline" 2>/dev/null; then
		kill -TERM "$pid"
		for _ in $(seq 1 150); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			echo "dwara serve (pid $pid) did not stop within 15 s of SIGTERM; killing it" >&2
			kill -KILL "$pid" 2>/dev/null || true
		fi
		echo "stopped dwara serve (pid $pid)" >&2
	fi
	rm -f "$pidfile"
fi

data="$state/pg"
if [ -f "$data/postmaster.pid" ]; then
	bin=""
	if command -v pg_ctl >/dev/null 2>&1; then
		bin=$(dirname "$(command -v pg_ctl)")
	else
		bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
	fi
	as_pg() {
		if [ "$(id -u)" = 0 ]; then
			runuser -u postgres -- "$@"
		else
			"$@"
		fi
	}
	if as_pg "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
		as_pg "$bin/pg_ctl" -D "$data" -m fast -w -t 30 stop >&2
		echo "stopped the private PostgreSQL under $data" >&2
	fi
fi
