# Dwara — make targets. `make run` and `make test` work on a fresh machine:
# scripts/postgres.sh finds PostgreSQL on 127.0.0.1:5432 or starts a private
# cluster under .dwara/pg (README.md, "Start here").

GO      ?= go
BIN     ?= bin/dwara
PKGS    := ./...
# Flags for `make run`; override with e.g. make run RUN_FLAGS=
RUN_FLAGS ?= --demo
# The version linked into the binary: `dwara version`, /healthz and the
# dwara_build_info metric report it (docs/operating.md, "The commands").
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo devel)
LDFLAGS := -X main.version=$(VERSION)
# How make run calls the binary: ./bin/dwara (as its banner then prints
# the client commands), or BIN itself when it is absolute.
RUN_BIN := $(if $(filter /%,$(BIN)),$(BIN),./$(BIN))

.PHONY: build install run demo-reset test bench lint fmt fuzz clean h2spec

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/dwara

# go install puts dwara in $(go env GOBIN), else $(go env GOPATH)/bin.
install:
	$(GO) install -ldflags "$(LDFLAGS)" ./cmd/dwara

# The demo pools' ports, web-stable's two then web-canary's (default
# 9001,9002,9101), e.g. make run DEMO_PORTS=19001,19002,19101 when 9001 is
# taken.
DEMO_PORTS ?=
DEMO_FLAGS := $(if $(DEMO_PORTS),--demo-ports $(DEMO_PORTS))

# make run records its pid in $(DWARA_STATE)/run.pid (the shell execs
# dwara), so that make stop can stop it from another terminal.
DWARA_STATE ?= $(CURDIR)/.dwara
export DWARA_STATE
run: build
	@mkdir -p "$(DWARA_STATE)"
	DWARA_DATABASE_URL="$$(scripts/postgres.sh dwara)" sh -c 'echo $$$$ > "$(DWARA_STATE)/run.pid"; exec $(RUN_BIN) serve $(RUN_FLAGS) $(DEMO_FLAGS)'

# Stops what make run left running: its dwara serve (by its run.pid) and
# the private PostgreSQL cluster that scripts/postgres.sh started under
# .dwara/pg when nothing answered on 5432 (README.md, "Start here").
.PHONY: stop
stop:
	@scripts/stop.sh

# `make run` with the demo started afresh: the demo spec is published again
# as a new generation, whatever the database holds (its history is kept).
demo-reset: build
	DWARA_DATABASE_URL="$$(scripts/postgres.sh dwara)" $(RUN_BIN) serve --demo --reset $(filter-out --demo,$(RUN_FLAGS)) $(DEMO_FLAGS)

# The proxy and node tests run on each front in the one go test, as
# subtests named after it (TestX/fasthttp, TestX/nethttp).
# TEST_P is go test's -p: how many builds and test binaries run at once.
# Its default, the number of CPUs, leaves a 2-CPU machine idle while two
# test binaries that mostly wait (processes, browsers, demo scripts) hold
# both places and the other packages' builds queue behind them.
# The second run: the allocation counts of the hot path that lean on
# sync.Pool, which the race detector empties at random, so the first run
# skips them (about 30 s on a cold build cache, a few with a warm one).
TEST_P ?= 3
ALLOC_TESTS = ^(TestCacheHitAllocatesNothing|TestMemoryConnReused|TestModelRoutingAllocs)$$
test:
	DWARA_TEST_DATABASE_URL="$$(scripts/postgres.sh postgres)" $(GO) test -race -count=1 -p $(TEST_P) -timeout 15m $(PKGS)
	$(GO) test -count=1 -run '$(ALLOC_TESTS)' ./gateway/proxy/

bench:
	DWARA_TEST_DATABASE_URL="$$(scripts/postgres.sh postgres)" $(GO) test -run='^$$' -bench=. -benchmem $(PKGS)

# FuzzEndpointAnswer and FuzzDecodeBody are bounded by count, not time: an
# input takes about a second through the two fronts, and a YAML input with
# aliases can take seconds to refuse, and Go 1.26's fuzzing fails a target
# whose worker is still running one when a -fuzztime duration ends
# (go.dev/issue/75804).
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzReadCookie -fuzztime=30s ./gateway/affinity
	$(GO) test -run='^$$' -fuzz=FuzzParseSpec -fuzztime=30s ./gateway/config
	$(GO) test -run='^$$' -fuzz=FuzzFastFrontRequest -fuzztime=30s ./gateway/proxy
	$(GO) test -run='^$$' -fuzz='^FuzzRouteOddPaths$$' -fuzztime=30s ./gateway/proxy
	$(GO) test -run='^$$' -fuzz='^FuzzEndpointAnswer$$' -fuzztime=120x ./gateway/proxy
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeBody$$' -fuzztime=40000x ./api

# The fault and abuse suite (faults/, docs/reliability.md, "Tests"): PostgreSQL stopped,
# restarted and hung under traffic (in private clusters; the shared server
# is never stopped), SIGKILL right after a 201, a publish the database
# refuses, a replica that was down, a rolling restart under load, and a soak
# of DWARA_SOAK with a flip every 2 s; then the two fuzz targets of the
# suite for FAULTS_FUZZTIME each. `make test` skips faults/ (it needs
# DWARA_FAULTS=1).
DWARA_SOAK      ?= 5m
FAULTS_FUZZTIME ?= 15s
# FuzzDecodeBody's count (see fuzz above): about 15 s at its usual rate.
FAULTS_FUZZ_BODY ?= 20000x
.PHONY: test-faults
test-faults:
	DWARA_FAULTS=1 DWARA_SOAK=$(DWARA_SOAK) DWARA_TEST_DATABASE_URL="$$(scripts/postgres.sh postgres)" \
		$(GO) test -count=1 -v -timeout 20m ./faults/
	$(GO) test -run='^$$' -fuzz='^FuzzRouteOddPaths$$' -fuzztime=$(FAULTS_FUZZTIME) -fuzzminimizetime=5s ./gateway/proxy
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeBody$$' -fuzztime=$(FAULTS_FUZZ_BODY) -fuzzminimizetime=5s ./api

# The chaos run (faults/chaos_test.go, docs/reliability.md, "Reliability"): dwara serve,
# two database replicas and a control-plane replica from the binary on a
# private PostgreSQL, under load with a flip or weights change every 2 s,
# for CHAOS_DURATION, with processes killed (SIGKILL, SIGTERM), PostgreSQL
# stopped (-m immediate) and frozen (SIGSTOP), and endpoints killed at
# random; it prints its seed (CHAOS_SEED=N replays the faults) and a table
# of figures.
CHAOS_DURATION ?= 3m
.PHONY: chaos
chaos:
	DWARA_CHAOS=1 CHAOS_DURATION=$(CHAOS_DURATION) $(GO) test -count=1 -v -run '^TestChaos$$' -timeout 90m ./faults/

# h2spec (github.com/summerwind/h2spec 2.2.1), the HTTP/2 conformance
# suite, built from the module proxy with the versions tools/h2spec pins
# (its own module: nothing of it reaches dwara's). TestH2spec in cmd/dwara
# runs it against a dwara process serving TLS; make test runs that test
# when bin/h2spec exists, and make h2spec builds it if missing and runs
# that test alone.
H2SPEC ?= bin/h2spec
$(H2SPEC): tools/h2spec/go.mod tools/h2spec/go.sum
	cd tools/h2spec && $(GO) build -ldflags "-X main.VERSION=2.2.1" -o $(abspath $(H2SPEC)) github.com/summerwind/h2spec/cmd/h2spec

h2spec: $(H2SPEC)
	DWARA_H2SPEC=$(abspath $(H2SPEC)) $(GO) test -race -count=1 -run '^TestH2spec$$' -v ./cmd/dwara/

# The integrations in modules of their own (docs/integrations.md, "Argo Rollouts"): the
# traffic-router plugin's test starts the plugin through go-plugin with
# Argo Rollouts' own RPC types against a dwara serve and gateway it builds
# from this tree, on a database of its own.
.PHONY: test-integrations
test-integrations:
	cd integrations/argo-rollouts && $(GO) vet ./... && \
		DWARA_TEST_DATABASE_URL="$$($(CURDIR)/scripts/postgres.sh postgres)" $(GO) test -race -count=1 -timeout 10m ./...

# The alerting and recording rules (deploy/prometheus, docs/observability.md, "Alerts"):
# promtool checks them and runs their unit tests; make test does the same
# through deploy/prometheus's TestRules when promtool is on PATH.
PROMTOOL ?= promtool
.PHONY: test-rules
test-rules:
	cd deploy/prometheus && $(PROMTOOL) check rules dwara.rules.yml && $(PROMTOOL) test rules dwara.rules_test.yml

# openapi/openapi.yaml through redocly lint and spectral lint (OpenAPI
# ruleset), pinned in tools/openapi-lint and installed there with npm when
# missing: no error and no warning that the spec does not explain.
.PHONY: lint-openapi
lint-openapi:
	scripts/lint-openapi.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "not gofmt-ed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

clean:
	rm -rf bin tools/openapi-lint/node_modules

# Side-by-side benchmark: direct, nginx, HAProxy and dwara doing the same
# canary split on 127.0.0.1, over a matrix of workloads (bench/README.md).
# Knobs as variables or environment: ROUNDS DURATION WARMUP CONNECTIONS
# CANARY_PERCENT DWARA_BIN CONTESTANTS WORKLOADS H2_CLIENTS H2_STREAMS.
.PHONY: bench-compare
bench-compare: build
	$(GO) build -o bin/bench-compare ./bench/compare
	$(GO) build -o bin/bench-upstream ./bench/upstream
	$(GO) build -o bin/bench-tlsload ./bench/tlsload
	./bin/bench-compare

# The runnable demos (demos/README.md): one script per scenario, each
# checking its property end to end on loopback (07-09 on a database of
# their own); about 20 s after the build. The test in demos/, part of
# make test, also runs each one against a deliberately wrong setup.
.PHONY: demos
demos: build
	DWARA_BIN=$(abspath $(BIN)) demos/run-all
