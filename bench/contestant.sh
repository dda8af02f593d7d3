#!/usr/bin/env bash
# Runs dwara as the extra contestant of the side-by-side proxy benchmark
# (the canary-split harness that compares nginx and HAProxy): it writes a
# spec splitting CANARY_PERCENT of requests to the canary pool and serves it
# from the file, in the foreground.
#
#   make build
#   CONTESTANT_NAME=dwara CONTESTANT_CMD="$PWD/bench/contestant.sh" path/to/bench/run.sh
#
# Environment (set by the harness): CONTESTANT_PORT, STABLE_PORTS,
# CANARY_PORTS, CANARY_PERCENT, BENCH_WORKDIR, and for its TLS workloads
# (WORKLOAD=tls, h2) TLS_CERT and TLS_KEY, which dwara then serves TLS with.
# DWARA_BIN overrides the binary.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${DWARA_BIN:-$here/../bin/dwara}
eps() { # "p1,p2" -> "127.0.0.1:p1", "127.0.0.1:p2"
	local out="" p
	IFS=, read -ra ports <<<"$1"
	for p in "${ports[@]}"; do out+="${out:+, }\"127.0.0.1:$p\""; done
	echo "$out"
}
spec=${BENCH_WORKDIR:-/tmp}/dwara-bench.yaml
cat >"$spec" <<YAML
upstreams:
  - {name: stable, endpoints: [$(eps "$STABLE_PORTS")]}
  - {name: canary, endpoints: [$(eps "$CANARY_PORTS")]}
services:
  - name: bench
    split:
      targets:
        - {upstream: stable, weight: $((100 - CANARY_PERCENT))}
        - {upstream: canary, weight: $CANARY_PERCENT}
YAML
tls=()
if [[ -n ${TLS_CERT:-} ]]; then tls=(--tls-cert "$TLS_CERT" --tls-key "$TLS_KEY"); fi
DWARA_LOG_LEVEL=${DWARA_LOG_LEVEL:-warn} exec "$bin" gateway --config "$spec" \
	--listen "127.0.0.1:$CONTESTANT_PORT" --metrics-listen 127.0.0.1:0 ${tls[@]+"${tls[@]}"}
