# shellcheck shell=bash
# What every demo script shares; sourced by each of them, never run.
#
# A script sources this first. It then has:
#   WORK            a fresh temporary directory, removed at exit
#   BREAK           1 when DEMO_BREAK=1: run against the deliberately wrong
#                   spec or setup, so the script's check must fail
#   build           sets BIN (dwara) and UPSTREAM (demos/upstream), built once
#                   into WORK unless DWARA_BIN / DEMO_UPSTREAM_BIN name them
#   start_upstream  starts demos/upstream; POOL[name] holds its addresses
#   start_gateway   `dwara gateway --config FILE`; sets PROXY
#   start_serve     `dwara serve` on a fresh database; sets PROXY, API
#   fail / pass     the verdict; fail exits 1 with "FAIL: <demo>: <why>"
#
# Everything started is stopped by PID at exit, on Ctrl-C and on SIGTERM,
# and the database of start_serve is dropped. Every wait is bounded.

DEMOS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$DEMOS_DIR/.." && pwd)
DEMO_NAME=$(basename "$0")
# shellcheck disable=SC2034 # used by the scripts that source this
BREAK=${DEMO_BREAK:-0}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dwara-demo.XXXXXX")
PIDS=()        # every process started, stopped at exit
LOGS=()        # their logs, shown when a step (not the check) fails
DB_ADMIN_URL="" # the server's maintenance database, when start_serve made one
DB_NAME=""
CHECKED=0 # 1 once fail was called: the failure is the demo's verdict
declare -A POOL=()
declare -A USED_PORTS=()

cleanup() {
	local rc=$? pid
	trap - EXIT INT TERM
	for pid in "${PIDS[@]}"; do
		# A load loop's subshell may have a curl running: stop it too.
		pkill -TERM -P "$pid" 2>/dev/null || true
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		for _ in $(seq 1 100); do # 10 s at most each
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
	done
	# A step that broke (not the check, not an interrupt): show the logs.
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 130 ] && [ "$rc" -ne 143 ] && [ "$CHECKED" -eq 0 ]; then
		local log
		for log in "${LOGS[@]}"; do
			[ -s "$log" ] || continue
			echo "--- last lines of $(basename "$log")" >&2
			tail -n 15 "$log" >&2
		done
	fi
	if [ -n "$DB_NAME" ]; then
		if psql "$DB_ADMIN_URL" -qAtc "DROP DATABASE IF EXISTS \"$DB_NAME\" WITH (FORCE)" >/dev/null 2>&1; then
			:
		else
			echo "note: could not drop database $DB_NAME on $(redact "$DB_ADMIN_URL")" >&2
		fi
	fi
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'echo "interrupted; stopping what $DEMO_NAME started" >&2; exit 130' INT
trap 'exit 143' TERM

# signalled passes on an interrupt: it exits with RC when a command ended
# by a signal (Ctrl-C reaches curl too), and ignores any other failure.
signalled() { # RC
	if [ "$1" -gt 128 ]; then
		exit "$1"
	fi
}

# say prints a line of the demo's story; step a heading.
say() { printf '%s\n' "$*"; }
step() { printf '\n== %s\n' "$*"; }

# die stops the demo over a problem of its setup (exit 2).
die() {
	echo "ERROR: $DEMO_NAME: $*" >&2
	exit 2
}

# fail is the demo's verdict that its property does not hold (exit 1).
fail() {
	CHECKED=1
	echo "FAIL: $DEMO_NAME: $*" >&2
	exit 1
}

pass() { printf '\nPASS: %s: %s\n' "$DEMO_NAME" "$*"; }

# need checks that each command exists, and that curl has -w %header{}
# (curl 7.84 or newer).
need() {
	local c
	for c in "$@"; do
		command -v "$c" >/dev/null 2>&1 || die "needs $c on PATH"
		if [ "$c" = curl ]; then
			local v
			v=$(curl --version | awk 'NR == 1 { print $2 }')
			[ "$(printf '%s\n' 7.84.0 "$v" | sort -V | head -n 1)" = 7.84.0 ] ||
				die "needs curl 7.84 or newer (for -w %header{...}); this one is $v"
		fi
	done
}

# redact hides a URL's password.
redact() { sed -E 's#(://[^:/@]*:)[^@]*@#\1***@#' <<<"$1"; }

# build sets BIN and UPSTREAM: $DWARA_BIN and $DEMO_UPSTREAM_BIN when set,
# else both built into WORK.
build() {
	BIN=${DWARA_BIN:-}
	UPSTREAM=${DEMO_UPSTREAM_BIN:-}
	if [ -z "$BIN" ] || [ -z "$UPSTREAM" ]; then
		need go
	fi
	if [ -z "$BIN" ]; then
		BIN=$WORK/dwara
		(cd "$ROOT" && go build -o "$BIN" ./cmd/dwara) || die "go build ./cmd/dwara failed"
	fi
	if [ -z "$UPSTREAM" ]; then
		UPSTREAM=$WORK/upstream
		(cd "$ROOT" && go build -o "$UPSTREAM" ./demos/upstream) || die "go build ./demos/upstream failed"
	fi
	[ -x "$BIN" ] || die "DWARA_BIN=$BIN is not an executable"
	[ -x "$UPSTREAM" ] || die "DEMO_UPSTREAM_BIN=$UPSTREAM is not an executable"
}

# background starts a server in the background with its output in LOG,
# remembered to be stopped at exit. Sets LAST_PID. It runs in a session of
# its own (setsid, which execs it in place, so LAST_PID is the server's), so
# that a Ctrl-C reaches only the script, which then stops it by PID: the
# servers never see requests fail under them before the script's trap runs.
background() { # LOG CMD...
	local log=$1
	shift
	if command -v setsid >/dev/null 2>&1; then
		setsid "$@" >"$log" 2>&1 </dev/null &
	else
		"$@" >"$log" 2>&1 </dev/null &
	fi
	LAST_PID=$!
	PIDS+=("$LAST_PID")
	LOGS+=("$log")
}

# start_upstream runs demos/upstream with the given -pool flags and fills
# POOL[name] with each pool's addresses, space-separated.
start_upstream() { # -pool NAME=ADDR[@DELAY],... ...
	local out=$WORK/upstream.log name addrs
	background "$out" "$UPSTREAM" "$@"
	for _ in $(seq 1 100); do # 10 s
		grep -qx ready "$out" && break
		kill -0 "${PIDS[-1]}" 2>/dev/null || die "the demo upstream did not start: $(tail -n 3 "$out")"
		sleep 0.1
	done
	grep -qx ready "$out" || die "the demo upstream was not ready within 10 s"
	while read -r _ name addrs; do
		# shellcheck disable=SC2034 # read by the scripts that source this
		POOL[$name]=$addrs
	done < <(grep '^pool ' "$out")
}

# pick_port prints a loopback port in 20000-31999 that nothing answers on
# and this demo has not picked before (the kernel's ephemeral ports, which
# curl's connections use, start above it).
pick_port() {
	local p
	for _ in $(seq 1 100); do
		p=$((20000 + RANDOM % 12000))
		[ -n "${USED_PORTS[$p]:-}" ] && continue
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			USED_PORTS[$p]=1
			echo "$p"
			return 0
		fi
	done
	die "found no free port in 20000-31999"
}

# http_code prints the status of a GET of URL, 000 when it got none.
http_code() { # URL
	curl -s -o /dev/null --max-time 2 -w '%{http_code}' "$1" 2>/dev/null || true
}

# wait_started waits up to SECONDS until URL answers 200 while PID lives.
# Returns 1 when the process ended (for a retry on another port), dies when
# time runs out.
wait_started() { # PID URL SECONDS WHAT
	local pid=$1 url=$2 secs=$3 what=$4 code
	for _ in $(seq 1 $((secs * 10))); do
		kill -0 "$pid" 2>/dev/null || return 1
		code=$(http_code "$url")
		[ "$code" = 200 ] && return 0
		sleep 0.1
	done
	die "$what did not answer 200 at $url within $secs s"
}

# start_gateway runs `dwara gateway --config FILE` on a free port and waits
# until its proxy answers 200 at PATH (default /). Sets PROXY.
start_gateway() { # FILE [PATH]
	local spec=$1 path=${2:-/} p m log=$WORK/gateway.log
	for _ in 1 2 3; do
		p=$(pick_port)
		m=$(pick_port)
		background "$log" env DWARA_LOG_LEVEL="${DWARA_LOG_LEVEL:-warn}" \
			"$BIN" gateway --config "$spec" --listen "127.0.0.1:$p" --metrics-listen "127.0.0.1:$m"
		PROXY=http://127.0.0.1:$p
		wait_started "$LAST_PID" "$PROXY$path" 10 "dwara gateway" && return 0
		grep -q 'address already in use' "$log" || die "dwara gateway stopped: $(tail -n 3 "$log")"
	done
	die "dwara gateway found no free port in 3 tries"
}

# url_with_db prints URL with its database replaced by NAME.
url_with_db() { # URL NAME
	local url=$1 name=$2 base query rest
	base=${url%%\?*}
	query=${url#"$base"}
	rest=${base#*://}
	case $rest in
	*/*) base=${base%/*} ;;
	esac
	echo "$base/$name$query"
}

# start_serve runs `dwara serve` on a fresh database of the server that
# scripts/postgres.sh finds (DWARA_DATABASE_URL names another), dropped at
# exit, and waits for the API. Sets PROXY, API and DWARA_API_URL (for the
# client verbs).
start_serve() {
	need psql
	local server p a log=$WORK/serve.log
	server=$("$ROOT/scripts/postgres.sh" postgres) || die "no PostgreSQL (scripts/postgres.sh failed)"
	DB_ADMIN_URL=$(url_with_db "$server" postgres)
	DB_NAME=$(printf 'dwara_demo_%s_%s_%s' "${DEMO_NAME//[^a-z0-9]/_}" "$$" "$RANDOM")
	local url
	url=$(url_with_db "$server" "$DB_NAME")
	for _ in 1 2 3; do
		p=$(pick_port)
		a=$(pick_port)
		background "$log" env DWARA_LOG_LEVEL="${DWARA_LOG_LEVEL:-warn}" DWARA_ADMIN_TOKEN= DWARA_READ_TOKEN= \
			"$BIN" serve --database-url "$url" --listen "127.0.0.1:$p" --admin-listen "127.0.0.1:$a"
		PROXY=http://127.0.0.1:$p
		API=http://127.0.0.1:$a
		if wait_started "$LAST_PID" "$API/healthz" 30 "dwara serve"; then
			export DWARA_API_URL=$API
			unset DWARA_ADMIN_TOKEN
			return 0
		fi
		grep -q 'address already in use' "$log" || die "dwara serve stopped: $(tail -n 3 "$log")"
	done
	die "dwara serve found no free port in 3 tries"
}

# dw runs a client verb of dwara against the API of start_serve, as the
# actor "demo", and indents what it prints.
dw() { # VERB ARGS...
	USER=demo "$BIN" "$@" --api "$API" 2>&1 | sed 's/^/    /'
	return "${PIPESTATUS[0]}"
}

# wait_proxy waits up to 10 s until the proxy answers 200 at PATH.
wait_proxy() { # PATH
	for _ in $(seq 1 100); do
		[ "$(http_code "$PROXY$1")" = 200 ] && return 0
		sleep 0.1
	done
	die "the proxy did not answer 200 at $PROXY$1 within 10 s"
}

# api calls the admin API and prints the answer's body; dies unless the
# status is 2xx.
api() { # METHOD PATH [JSON]
	local out=$WORK/api.out code
	local opts=(-s --max-time 30 -o "$out" -w '%{http_code}' -X "$1")
	if [ $# -ge 3 ]; then
		opts+=(-H 'Content-Type: application/json' -H "X-Dwara-Actor: demo" --data-binary "$3")
	fi
	code=$(curl "${opts[@]}" "$API$2") || signalled $?
	case $code in
	2??) cat "$out" ;;
	*) die "$1 $2 answered ${code:-nothing}: $(head -c 400 "$out" 2>/dev/null)" ;;
	esac
}

# get sends COUNT GETs of PATH through the proxy, PARALLEL at a time (one
# curl process, keep-alive connections), and prints one line per answer:
# "CODE POOL ENDPOINT", pool and endpoint from the demo pool's X-Pool and
# X-Endpoint headers ("-" when absent, as in the gateway's own 502).
# Further arguments are curl options (a cookie jar, a source address).
get() { # PATH COUNT PARALLEL [CURL OPTIONS...]
	local path=$1 count=$2 par=$3 sep='?'
	shift 3
	case $path in *\?*) sep='&' ;; esac
	local opts=(-s --no-progress-meter --max-time 120 -o /dev/null -w '%{http_code} %header{x-pool} %header{x-endpoint}\n')
	if [ "$par" -gt 1 ]; then
		opts+=(--parallel --parallel-immediate --parallel-max "$par")
	fi
	{ curl "${opts[@]}" "$@" "$PROXY$path${sep}n=[1-$count]" || signalled $?; } |
		awk '{ print $1, ($2 == "" ? "-" : $2), ($3 == "" ? "-" : $3) }'
}

# get_keyed is get with each request keyed by a fixed request id
# (X-Request-Id: demo-1 .. demo-COUNT), so a split keyed by the request
# id lands the same way on every run.
get_keyed() { # PATH COUNT PARALLEL
	local path=$1 count=$2 par=$3 sep='?' i cfg=$WORK/keyed.curl
	case $path in *\?*) sep='&' ;; esac
	: >"$cfg"
	for ((i = 1; i <= count; i++)); do
		[ "$i" -gt 1 ] && echo next >>"$cfg"
		printf 'url = "%s"\nheader = "X-Request-Id: demo-%d"\noutput = /dev/null\nwrite-out = "%%{http_code} %%header{x-pool} %%header{x-endpoint}\\n"\nmax-time = 120\n' \
			"$PROXY$path${sep}n=$i" "$i" >>"$cfg"
	done
	local opts=(-s --no-progress-meter)
	if [ "$par" -gt 1 ]; then
		opts+=(--parallel --parallel-immediate --parallel-max "$par")
	fi
	{ curl "${opts[@]}" --config "$cfg" || signalled $?; } |
		awk '{ print $1, ($2 == "" ? "-" : $2), ($3 == "" ? "-" : $3) }'
}

# tally reads "CODE POOL ENDPOINT" lines and prints the requests per pool
# (BY=pool) or per endpoint (BY=endpoint) with their shares, then the total.
tally() { # BY < lines
	local in=$WORK/tally.in
	cat >"$in"
	printf '  %-8s %-22s %8s %7s\n' pool "$([ "$1" = endpoint ] && echo endpoint)" requests share
	awk -v by="$1" '
		{ k = (by == "pool") ? $2 " -" : $2 " " $3; n[k]++; total++ }
		END { for (k in n) { split(k, f, " "); printf "  %-8s %-22s %8d %6.1f%%\n", f[1], (f[2] == "-" ? "" : f[2]), n[k], 100 * n[k] / total } }' "$in" | sort
	printf '  %-31s %8d\n' total "$(wc -l <"$in")"
}

# failed prints how many "CODE POOL ENDPOINT" lines of FILE are not 200.
failed() { # FILE
	awk '$1 != 200 { n++ } END { print n + 0 }' "$1"
}

# served prints how many lines of FILE are 200 answers of POOL.
served() { # FILE POOL
	awk -v pool="$2" '$1 == 200 && $2 == pool { n++ } END { print n + 0 }' "$1"
}

# yaml_list prints its arguments as a YAML flow list of strings.
yaml_list() { # ITEM...
	local out="" i
	for i in "$@"; do out+="${out:+, }\"$i\""; done
	echo "[$out]"
}

# show prints FILE indented, for the reader.
show() { # FILE
	sed 's/^/    /' "$1"
}

# spread prints "min max" of the counts of column COL (2 pool, 3 endpoint)
# of "CODE POOL ENDPOINT" lines in FILE, over the given keys (a key with
# no line counts 0).
spread() { # FILE COL KEY...
	local file=$1 col=$2
	shift 2
	awk -v col="$col" -v keys="$*" '
		BEGIN { nk = split(keys, k, " ") }
		{ n[$col]++ }
		END {
			min = -1; max = 0
			for (i = 1; i <= nk; i++) { c = n[k[i]] + 0; if (min < 0 || c < min) min = c; if (c > max) max = c }
			print min, max
		}' "$file"
}
