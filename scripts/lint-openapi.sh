#!/usr/bin/env bash
# make lint-openapi: openapi/openapi.yaml through Redocly's and Spectral's
# linters (docs/api.md, "Using the API with curl"), failing on any error or
# warning. The few places set aside are listed in openapi/redocly.yaml's
# .redocly.lint-ignore.yaml and openapi/.spectral.yaml, each explained by a
# comment in the spec. The linters are the versions tools/openapi-lint pins
# (package.json and package-lock.json), installed there with npm ci when
# missing or older than the lock file (about 10 s with an empty npm cache,
# 83 MB in tools/openapi-lint/node_modules); the lint itself takes about
# 2.5 s.
set -euo pipefail
cd "$(dirname "$0")/.."

tools=tools/openapi-lint
bin=$tools/node_modules/.bin
if [ ! -x "$bin/redocly" ] || [ ! -x "$bin/spectral" ] ||
	[ "$tools/package-lock.json" -nt "$tools/node_modules/.package-lock.json" ]; then
	echo "installing the OpenAPI linters in $tools (npm ci)"
	npm ci --prefix "$tools" --no-audit --no-fund --loglevel=error >/dev/null
fi

# Redocly: errors fail it; a warning fails here. No telemetry.
out=$(REDOCLY_TELEMETRY=off "$bin/redocly" lint --config openapi/redocly.yaml --format=stylish openapi/openapi.yaml 2>&1) || {
	echo "$out"
	exit 1
}
if grep -Eq '^\s+[0-9]+:[0-9]+\s+warning\s' <<<"$out"; then
	echo "$out"
	echo "redocly lint: warnings (fix them, or set one aside in openapi/.redocly.lint-ignore.yaml with a comment in the spec)"
	exit 1
fi
echo "redocly lint: openapi/openapi.yaml: no error, no warning"

# Spectral, OpenAPI ruleset: a warning fails it.
"$bin/spectral" lint --quiet --ruleset openapi/.spectral.yaml --fail-severity=warn openapi/openapi.yaml
echo "spectral lint: openapi/openapi.yaml: no error, no warning"
