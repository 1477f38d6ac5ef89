# retry-scheduler. `make` lists the targets.
#
# Local stack: the Temporal CLI's dev server (SQLite file, Web UI) started by
# ./cmd/devserver, plus the RabbitMQ at $(RABBITMQ_URL). With TEMPORAL=postgres, the
# Temporal server on the PostgreSQL at $(TEMPORAL_POSTGRES_HOST):$(TEMPORAL_POSTGRES_PORT)
# instead (./cmd/devserver -engine postgres).

SHELL := /bin/bash
.DEFAULT_GOAL := help

GO ?= go
TEMPORAL_VERSION := v1.5.1
WORKFLOWCHECK_VERSION := v0.6.0
STATICCHECK_VERSION := v0.8.2
CACHE ?= $(HOME)/.cache/retry-scheduler
TEMPORAL_CLI := $(CACHE)/bin/temporal
WORKFLOWCHECK := $(CACHE)/bin/workflowcheck
STATICCHECK := $(CACHE)/bin/staticcheck
# The Temporal server and its SQL schema tool, for the postgres engine: the server version
# the CLI's dev server embeds (devserver.ServerVersion). Their schemas are embedded in the
# tool, so nothing else is copied.
TEMPORAL_SERVER_VERSION := v1.29.1
TEMPORAL_SERVER_DIR := $(CACHE)/temporal-server-$(TEMPORAL_SERVER_VERSION)
TEMPORAL_SERVER_BINS := $(TEMPORAL_SERVER_DIR)/bin/server $(TEMPORAL_SERVER_DIR)/bin/sql
# The engine of `make run`: dev (the CLI's dev server, Web UI) or postgres.
TEMPORAL ?= dev
# The PostgreSQL of the postgres engine (its password only from the environment:
# TEMPORAL_POSTGRES_PASSWORD).
TEMPORAL_POSTGRES_HOST ?= 127.0.0.1
TEMPORAL_POSTGRES_PORT ?= 5432
TEMPORAL_POSTGRES_USER ?= postgres
RABBITMQ_URL ?= amqp://guest:guest@127.0.0.1:5672/
# Frontend port of the dev server `make run` uses (or reuses); UI on port+1000.
TEMPORAL_PORT ?= 7233
# How long fuzz-short (part of make test) and fuzz run each Fuzz target.
FUZZ_TIME ?= 10s
FUZZ_LONG_TIME ?= 2m
# The unit tier's coverage gates: every product package and the total, a ratchet, in
# COVERAGE_GATES_FILE; COVERAGE_GATES adds package=minimum percent gates (internal/testreport).
COVERAGE_GATES_FILE ?= internal/testreport/coverage-gates.txt
COVERAGE_GATES ?=
# Passed to the integration tier's go test, and to test-e2e-postgres's.
INTEGRATION_TIMEOUT ?= 40m
E2E_TIMEOUT ?= 35m
# How many of the tests that call t.Parallel (the e2e tests that spend minutes waiting) run at
# once: all of them, so that together they take the longest one's time.
E2E_PARALLEL ?= 6
# e2e tests the PostgreSQL pass leaves to the dev-server pass: what they check does not depend
# on the engine (the SDK's fatal-error grace alone takes three minutes; a RabbitMQ node lost
# under load is the broker's and the service's AMQP path).
E2E_POSTGRES_SKIP ?= ^(TestFatalWorkerErrorEndsTheProcess|TestClusterNodeLossUnderLoad)$$
# Why, in the PostgreSQL pass's skip report (each test E2E_POSTGRES_SKIP matches is listed).
E2E_POSTGRES_SKIP_REASON ?= not run on PostgreSQL by E2E_POSTGRES_SKIP: what it checks does not depend on the engine; the dev-server pass runs it
# 0: test-integration runs the PostgreSQL pass after the dev-server tier; 1: beside it (two
# servers, one broker; each test has its own queues and task queue), its output shown when
# both have ended. Beside takes 10-15 min less, but on a 2-core machine the two servers then
# share the cores with every test's service: in CI runs of 2026-11-28 that load failed tests
# that pass alone (a namespace delete past 30 s, state queries past the API's timeouts).
E2E_POSTGRES_BESIDE ?= 0
# The PostgreSQL pass's race detector: off by default. The unit and dev-server tiers run every
# test with -race; the PostgreSQL pass checks the engine, and -race makes each e2e process
# take several times the CPU (set -race to have it).
E2E_POSTGRES_RACE ?=

# cmd/devserver and the devserver package find the CLI through $TEMPORAL_CLI, the server
# and schema tool through $TEMPORAL_SERVER_DIR, PostgreSQL through $TEMPORAL_POSTGRES_*.
export TEMPORAL_CLI
export TEMPORAL_SERVER_DIR
export TEMPORAL_POSTGRES_HOST TEMPORAL_POSTGRES_PORT TEMPORAL_POSTGRES_USER
export RABBITMQ_URL

.PHONY: help tools temporal-server chromium promtool kubectl rabbitmq build image replay run docs test test-unit test-integration test-e2e-postgres lint demo bench soak soak-cluster fuzz fuzz-short test-node test-cluster test-processes test-temporal-hosts clean

help: ## List the targets
	@echo "retry-scheduler: make <target>"
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-17s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "Variables (make VAR=value): CACHE RABBITMQ_URL TEMPORAL TEMPORAL_PORT TEMPORAL_POSTGRES_HOST TEMPORAL_POSTGRES_PORT TEMPORAL_POSTGRES_USER FUZZ_TIME FUZZ_LONG_TIME COVERAGE_GATES_FILE COVERAGE_GATES E2E_POSTGRES_SKIP E2E_POSTGRES_SKIP_REASON E2E_POSTGRES_BESIDE E2E_POSTGRES_RACE INTEGRATION_TIMEOUT E2E_TIMEOUT E2E_PARALLEL VERSION REVISION IMAGE HISTORIES"
	@echo "Under CI (CI set to anything but false or 0) a test whose prerequisite is missing fails instead of skipping, any skipped test fails the run, and so does any test of the tree that make test ran in none of its tiers."

$(TEMPORAL_CLI):
	@echo "Installing the Temporal CLI $(TEMPORAL_VERSION) into $(CACHE)/bin (several minutes the first time)"
	GOBIN=$(CACHE)/bin $(GO) install github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_VERSION)

# The linters: a failed install fails the target (make lint cannot pass without them).
$(WORKFLOWCHECK):
	@echo "Installing workflowcheck $(WORKFLOWCHECK_VERSION) into $(@D)"
	GOBIN=$(@D) $(GO) install go.temporal.io/sdk/contrib/tools/workflowcheck@$(WORKFLOWCHECK_VERSION)

$(STATICCHECK):
	@echo "Installing staticcheck $(STATICCHECK_VERSION) into $(@D)"
	GOBIN=$(@D) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

tools: $(TEMPORAL_CLI) $(WORKFLOWCHECK) $(STATICCHECK) chromium promtool kubectl ## Install the Temporal CLI (dev server), workflowcheck and staticcheck into $(CACHE)/bin, and chromium and promtool; check for kubectl

# One go install builds both (they share most of their packages); a file target, so later
# runs reuse them.
$(TEMPORAL_SERVER_BINS) &:
	@echo "Installing the Temporal server $(TEMPORAL_SERVER_VERSION) and its SQL schema tool into $(TEMPORAL_SERVER_DIR)/bin (several minutes the first time)"
	GOBIN=$(TEMPORAL_SERVER_DIR)/bin $(GO) install go.temporal.io/server/cmd/server@$(TEMPORAL_SERVER_VERSION) go.temporal.io/server/cmd/tools/sql@$(TEMPORAL_SERVER_VERSION)

temporal-server: $(TEMPORAL_SERVER_BINS) ## Install the Temporal server and its schema tool (the postgres engine) into $(CACHE)/temporal-server-$(TEMPORAL_SERVER_VERSION)/bin

# The ops page's browser test (e2e/browser_test.go) drives Debian's chromium; without it
# the test skips with a message (fails under CI).
chromium: ## Install Debian's chromium for the browser test, when missing and apt-get is usable
	@if [ -x "$${CHROMIUM:-/usr/bin/chromium}" ]; then :; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		echo "Installing chromium (for the ops page's browser test)"; \
		apt-get install -y chromium >/dev/null || { apt-get update >/dev/null && apt-get install -y chromium >/dev/null; } \
			|| echo "warning: chromium did not install; the browser test will skip (fail under CI)"; \
	else echo "chromium is not installed (apt-get install -y chromium): the browser test will skip (fail under CI)"; fi

# The alert rules' unit tests (alerts/rules_test.go) run promtool, from Debian's prometheus
# package; without it they skip with a message (fail under CI). Only the package's
# files are wanted: Debian's policy-rc.d, or the absence of an init system, keeps its
# server from starting.
promtool: ## Install promtool (Debian's prometheus) for the alert rules' tests, when missing and apt-get is usable
	@if command -v promtool >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		echo "Installing promtool (Debian's prometheus, for the alert rules' tests)"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y --no-install-recommends prometheus >/dev/null || { apt-get update >/dev/null && apt-get install -y --no-install-recommends prometheus >/dev/null; } \
			|| echo "warning: promtool did not install; the alert rules' tests will skip (fail under CI)"; \
	else echo "promtool is not installed (apt-get install -y prometheus): the alert rules' tests will skip (fail under CI)"; fi

# The Kubernetes manifests' test (deploy/kubernetes) renders them with `kubectl kustomize`:
# kubectl is not in Debian's archive, so this only checks for it and says how to get it.
kubectl: ## Check for kubectl (kustomize built in), which the Kubernetes manifests' test runs
	@if command -v kubectl >/dev/null 2>&1; then :; \
	else echo "kubectl is not installed (https://kubernetes.io/docs/tasks/tools/): the Kubernetes manifests' test will skip (fail under CI)"; fi

rabbitmq: ## Make sure RabbitMQ answers at RABBITMQ_URL (starts a local rabbitmq-server if it can)
	@hostport=$${RABBITMQ_URL#*://}; hostport=$${hostport##*@}; hostport=$${hostport%%/*}; hostport=$${hostport%%\?*}; \
	host=$${hostport%:*}; port=$${hostport##*:}; \
	if [ "$$host" = "$$hostport" ]; then \
		case "$$RABBITMQ_URL" in amqps:*) port=5671;; *) port=5672;; esac; \
	fi; \
	[ -n "$$host" ] || host=127.0.0.1; \
	up() { timeout 2 bash -c "exec 3<>/dev/tcp/$$host/$$port" 2>/dev/null; }; \
	if up; then echo "RabbitMQ answers at $$host:$$port"; exit 0; fi; \
	case "$$host" in 127.0.0.1|localhost|::1) is_local=1;; *) is_local=0;; esac; \
	if [ $$is_local = 1 ] && command -v rabbitmq-server >/dev/null 2>&1; then \
		echo "RabbitMQ is not running at $$host:$$port: starting rabbitmq-server -detached"; \
		rabbitmq-server -detached || true; \
		timeout 60 rabbitmqctl await_startup >/dev/null 2>&1 || true; \
		for i in $$(seq 1 60); do up && { echo "RabbitMQ is up at $$host:$$port"; exit 0; }; sleep 1; done; \
	fi; \
	echo "RabbitMQ is not reachable at $$host:$$port: start it or set RABBITMQ_URL" >&2; exit 1

# The build's identity, stamped into buildinfo (retry-scheduler -version, the build_info
# metric, the default SERVICE_VERSION) and the image's labels.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X github.com/retry-scheduler/retry-scheduler/internal/buildinfo.version=$(VERSION) -X github.com/retry-scheduler/retry-scheduler/internal/buildinfo.revision=$(REVISION)
IMAGE ?= retry-scheduler

build: ## Build all commands into bin/, version-stamped
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/... ./starter

image: ## Build the container image $(IMAGE):$(VERSION) (needs a Docker engine)
	@command -v docker >/dev/null 2>&1 || { echo "docker is not installed: the image is built where a Docker engine runs" >&2; exit 1; }
	docker build --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) -t $(IMAGE):$(VERSION) .

# Histories exported from production (temporal workflow show -w ID -o json > DIR/ID.json)
# replayed against this checkout's workflow code before it is deployed (docs/operations.md).
replay: ## Replay exported workflow histories against the current code: make replay HISTORIES=dir
	@[ -n "$(HISTORIES)" ] || { echo "usage: make replay HISTORIES=<directory of exported histories>" >&2; exit 2; }
	REPLAY_HISTORIES="$(abspath $(HISTORIES))" $(GO) test -count=1 -run 'TestReplay' ./workflows/

# The server (dev or postgres, by TEMPORAL) of `make run`: its devserver flags, its name in
# messages, and how many tenths of a second to wait for it (postgres: schema set-up too).
ifeq ($(TEMPORAL),postgres)
RUN_DEPS := $(TEMPORAL_SERVER_BINS)
RUN_SERVER_FLAGS = -engine postgres -port $(TEMPORAL_PORT)
RUN_SERVER_NAME := Temporal server $(TEMPORAL_SERVER_VERSION) on PostgreSQL
RUN_WAIT_TICKS := 3000
else
RUN_DEPS := $(TEMPORAL_CLI)
RUN_SERVER_FLAGS = -port $(TEMPORAL_PORT) -ui-port $$(( $(TEMPORAL_PORT) + 1000 ))
RUN_SERVER_NAME := Temporal dev server
RUN_WAIT_TICKS := 900
endif

# The dev server is built, not `go run`: go run does not pass SIGTERM on, and would
# leave the server behind. cmd/devserver reuses (exit 0) a healthy frontend already on
# the port, in which case nothing is stopped at the end. TEMPORAL=postgres runs the
# Temporal server on PostgreSQL instead (cmd/devserver's durable databases,
# retry_scheduler_temporal and _visibility, upgraded in place at each start; no Web UI).
run: $(RUN_DEPS) rabbitmq ## Run locally: the Temporal dev server (UI on :8233; TEMPORAL=postgres: on PostgreSQL) and `retry-scheduler all`, its ops page on 127.0.0.1
	@set -uo pipefail; mkdir -p $(CACHE) bin; \
	case "$(TEMPORAL)" in dev|postgres) ;; *) echo "TEMPORAL=$(TEMPORAL): want dev or postgres" >&2; exit 2;; esac; \
	$(GO) build -o bin/devserver ./cmd/devserver || exit 1; \
	addr_file=$(CACHE)/devserver.addr; rm -f $$addr_file; \
	bin/devserver $(RUN_SERVER_FLAGS) -addr-file $$addr_file >> $(CACHE)/devserver.log 2>&1 & pid=$$!; \
	stop_server() { if kill -0 $$pid 2>/dev/null; then echo "Stopping the $(RUN_SERVER_NAME)"; kill -TERM $$pid; wait $$pid; fi; }; \
	trap stop_server EXIT; trap 'exit 130' INT TERM; \
	for i in $$(seq 1 $(RUN_WAIT_TICKS)); do \
		[ -s $$addr_file ] && break; \
		if ! kill -0 $$pid 2>/dev/null; then echo "The $(RUN_SERVER_NAME) did not start; $(CACHE)/devserver.log says:" >&2; tail -n 30 $(CACHE)/devserver.log >&2; exit 1; fi; \
		sleep 0.1; \
	done; \
	[ -s $$addr_file ] || { echo "The $(RUN_SERVER_NAME) did not answer within $$(( $(RUN_WAIT_TICKS) / 10 ))s; see $(CACHE)/devserver.log" >&2; exit 1; }; \
	addr=$$(cat $$addr_file); \
	if [ "$(TEMPORAL)" = postgres ]; then \
		echo "$(RUN_SERVER_NAME) at $$addr; no Web UI on this engine (devserver log: $(CACHE)/devserver.log)"; \
	else \
		echo "Temporal at $$addr; Web UI http://127.0.0.1:$$(( $(TEMPORAL_PORT) + 1000 )) (dev server log: $(CACHE)/devserver.log)"; \
	fi; \
	api_tokens=$${API_TOKENS:-}; \
	if [ -z "$$api_tokens" ] && [ -z "$${API_TOKENS_FILE:-}" ] && [ "$${API_AUTH:-}" != off ]; then \
		dev_token=$$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'); api_tokens="dev:admin=$$dev_token"; \
		echo "Ops page http://127.0.0.1:$${HTTP_PORT:-8086}/ - sign in with this run's admin token: $$dev_token"; \
	fi; \
	API_TOKENS=$$api_tokens HTTP_ADDR=$${HTTP_ADDR:-127.0.0.1:$${HTTP_PORT:-8086}} TEMPORAL_ADDRESS=$$addr TEMPORAL_UI_URL=$${TEMPORAL_UI_URL:-$$([ "$(TEMPORAL)" = postgres ] || echo http://127.0.0.1:$$(( $(TEMPORAL_PORT) + 1000 )))} $(GO) run -ldflags "$(LDFLAGS)" ./cmd/retry-scheduler all

# Each tier's testreport appends the tests it saw (pass, fail, skip) to $TESTREPORT_RAN_FILE;
# at the end, testreport -not-run lists every Test and Fuzz function of the tree's *_test.go
# files (any build tag) that no tier ran, and those internal/testreport/outside-make-test.txt
# declares as run only outside make test, with why. Under CI a test not run fails make test.
test: tools temporal-server rabbitmq ## lint, unit tests with the coverage gate, integration tests on one dev server (e2e again on PostgreSQL), short fuzz runs, the tests not run
	@status=0; ran=$$(mktemp); trap 'rm -f $$ran' EXIT; export TESTREPORT_RAN_FILE=$$ran; \
	$(MAKE) --no-print-directory lint || status=1; \
	$(MAKE) --no-print-directory test-unit || status=1; \
	$(MAKE) --no-print-directory test-node || status=1; \
	$(MAKE) --no-print-directory test-integration || status=1; \
	$(MAKE) --no-print-directory fuzz-short || status=1; \
	echo "== tests not run by make test (the Test and Fuzz functions of every *_test.go of the tree, any build tag, against every tier's report)"; \
	$(TESTREPORT) -not-run -ran-file $$ran || status=1; \
	if [ $$status != 0 ]; then echo "make test: FAILED (see above)" >&2; else echo "make test: ok"; fi; \
	exit $$status

# Every go test of the tiers goes through internal/testreport: the plain output, then the
# list of skipped tests with their reasons (under CI any skip fails the run), and for the
# unit tier the coverage of each gated package and the total (failing below a gate:
# COVERAGE_GATES_FILE, COVERAGE_GATES). Under make test it also notes the tests it saw in
# $TESTREPORT_RAN_FILE, for the final list of tests not run.
TESTREPORT = $(GO) run ./internal/testreport

# A shell function of the recipes that read $CI: ci_true succeeds when CI is set to anything
# but false or 0 (any case; white space around it ignored): CI=yes, CI=on, a build number are
# CI. internal/testenv reads CI the same way (testenv.IsTrue; its test runs this definition).
CI_TRUE = ci_true() { [[ "$${CI-}" =~ ^[[:space:]]*(.*[^[:space:]])?[[:space:]]*$$ ]]; case "$${BASH_REMATCH[1],,}" in ''|false|0) return 1;; esac; }

test-unit: ## Unit tier: go test -race -cover ./... (no network), skipped tests listed, coverage gates (COVERAGE_GATES_FILE)
	@echo "== unit tests"
	@set -o pipefail; profile=$$(mktemp); trap 'rm -f $$profile' EXIT; \
	$(GO) build -o /dev/null ./internal/testreport || exit 1; \
	$(GO) test -race -json -cover -coverprofile=$$profile ./... 2>&1 \
		| $(TESTREPORT) -coverprofile $$profile -coverage-gates '$(COVERAGE_GATES_FILE)' -min-coverage '$(COVERAGE_GATES)'

# A shell function of the recipes below: await FILE PID TICKS NAME OUTPUT waits up to TICKS
# tenths of a second for the server process PID to write its address to FILE, and shows
# OUTPUT when it exits or does not answer in time.
AWAIT_ADDR = await() { \
	for i in $$(seq 1 $$3); do \
		[ -s $$1 ] && return 0; \
		if ! kill -0 $$2 2>/dev/null; then echo "The $$4 did not start:" >&2; cat $$5 >&2; return 1; fi; \
		sleep 0.1; \
	done; \
	echo "The $$4 did not answer within $$(( $$3 / 10 ))s" >&2; cat $$5 >&2; return 1; \
}

# One dev server (free port, no UI, temp DB) for the packages that have integration tests,
# named by TEMPORAL_ADDRESS, stopped when the tier ends whatever happens; test-e2e-postgres
# beside it (E2E_POSTGRES_BESIDE=1) or after it. Both results are printed.
# The tier is selected by build tag and package, with no -run pattern: every package that has
# a test file built only with -tags integration (testreport -tagged-packages) runs with that
# tag, whatever its tests are named (Fuzz targets run their seed corpora), except the tests of
# its files built without tags, which the unit tier ran: -skip of their names, computed per
# package, so each package is a go test of its own (still one at a time, -p 1; -skip names
# tests, not packages). make test's final list of tests not run shows anything that falls
# between the tiers.

test-integration: tools temporal-server rabbitmq ## Integration tier (-tags integration) against one shared dev server, test-e2e-postgres beside it
	@set -uo pipefail; tmp=$$(mktemp -d); pid=; pgpid=; \
	cleanup() { if [ -n "$$pid" ]; then kill -TERM $$pid 2>/dev/null && wait $$pid; fi; if [ -n "$$pgpid" ]; then wait $$pgpid; fi; rm -rf $$tmp; }; \
	trap cleanup EXIT; trap 'exit 130' INT TERM; \
	$(AWAIT_ADDR); \
	$(GO) build -o $$tmp/devserver ./cmd/devserver || exit 1; \
	if [ "$(E2E_POSTGRES_BESIDE)" = 1 ]; then \
		echo "== e2e tests on Temporal $(TEMPORAL_SERVER_VERSION) on PostgreSQL: running beside the dev-server tier (their output follows it)"; \
		$(MAKE) --no-print-directory test-e2e-postgres > $$tmp/postgres.out 2>&1 & pgpid=$$!; \
	fi; \
	$$tmp/devserver -for-test -db $$tmp/temporal.db -addr-file $$tmp/addr > $$tmp/devserver.out 2>&1 & pid=$$!; \
	await $$tmp/addr $$pid 900 "Temporal dev server" $$tmp/devserver.out || exit 1; \
	export TEMPORAL_ADDRESS=$$(cat $$tmp/addr); \
	echo "== integration tests against the Temporal dev server at $$TEMPORAL_ADDRESS (pid $$pid)"; \
	plan=$$($(TESTREPORT) -tagged-packages integration) || exit 1; \
	[ -n "$$plan" ] || { echo "no package has a test file built with -tags integration" >&2; exit 1; }; \
	echo "   packages: $$(cut -f1 <<< "$$plan" | paste -sd' ')"; \
	{ st=0; while IFS=$$'\t' read -r pkg skip <&3; do \
		$(GO) test -race -json -tags integration -timeout $(INTEGRATION_TIMEOUT) -p 1 -parallel $(E2E_PARALLEL) $${skip:+-skip "$$skip"} $$pkg || st=1; \
	done 3<<< "$$plan"; exit $$st; } 2>&1 | $(TESTREPORT); rc=$$?; \
	if [ $$rc != 0 ]; then echo "--- Temporal dev server log (last lines) ---"; tail -n 40 $$tmp/temporal.db.log; fi; \
	kill -TERM $$pid 2>/dev/null && wait $$pid; pid=; unset TEMPORAL_ADDRESS; \
	if [ -n "$$pgpid" ]; then \
		wait $$pgpid; pgrc=$$?; pgpid=; cat $$tmp/postgres.out; \
	else \
		$(MAKE) --no-print-directory test-e2e-postgres; pgrc=$$?; \
	fi; \
	result() { if [ $$1 = 0 ]; then echo ok; else echo FAILED; fi; }; \
	echo "== integration tests on the Temporal dev server: $$(result $$rc)"; \
	echo "== e2e tests on Temporal $(TEMPORAL_SERVER_VERSION) on PostgreSQL: $$(result $$pgrc)"; \
	[ $$rc = 0 ] && [ $$pgrc = 0 ]

# The e2e package against one Temporal server on PostgreSQL (free port, temporary databases
# dropped at the end), with TEMPORAL_ENGINE=postgres so that a test starting its own server
# gets one of the same engine.
# The PostgreSQL pass also runs the Temporal-host-loss tests (tag temporalhosts): they start
# two server processes of their own on PostgreSQL, about 20 s each.
E2E_POSTGRES_TAGS = integration temporalhosts

test-e2e-postgres: temporal-server rabbitmq ## e2e tests (-tags integration temporalhosts; -race with E2E_POSTGRES_RACE=-race) against the Temporal server on PostgreSQL
	@set -uo pipefail; tmp=$$(mktemp -d); pid=; \
	cleanup() { if [ -n "$$pid" ]; then kill -TERM $$pid 2>/dev/null && wait $$pid; fi; rm -rf $$tmp; }; \
	trap cleanup EXIT; trap 'exit 130' INT TERM; \
	$(AWAIT_ADDR); \
	$(GO) build -o $$tmp/devserver ./cmd/devserver || exit 1; \
	$$tmp/devserver -engine postgres -for-test -log $$tmp/temporal.log -addr-file $$tmp/addr > $$tmp/devserver.out 2>&1 & pid=$$!; \
	await $$tmp/addr $$pid 3000 "Temporal server $(TEMPORAL_SERVER_VERSION) on PostgreSQL" $$tmp/devserver.out || exit 1; \
	export TEMPORAL_ADDRESS=$$(cat $$tmp/addr) TEMPORAL_ENGINE=postgres; \
	echo "== e2e tests against Temporal $(TEMPORAL_SERVER_VERSION) on PostgreSQL at $$TEMPORAL_ADDRESS (pid $$pid; $$(sed -n 's/^Databases: //p' $$tmp/devserver.out))"; \
	: > $$tmp/excluded; \
	if [ -n '$(E2E_POSTGRES_SKIP)' ]; then \
		echo "== not run on PostgreSQL, by E2E_POSTGRES_SKIP (run on the dev server above): $(E2E_POSTGRES_SKIP)"; \
		$(GO) test $(E2E_POSTGRES_RACE) -tags '$(E2E_POSTGRES_TAGS)' -list '$(E2E_POSTGRES_SKIP)' ./e2e/ > $$tmp/excluded || { cat $$tmp/excluded; exit 1; }; \
	fi; \
	$(GO) test $(E2E_POSTGRES_RACE) -json -tags '$(E2E_POSTGRES_TAGS)' -timeout $(E2E_TIMEOUT) -p 1 -parallel $(E2E_PARALLEL) -skip '$(E2E_POSTGRES_SKIP)' ./e2e/ 2>&1 \
		| $(TESTREPORT) -excluded $$tmp/excluded -excluded-reason '$(E2E_POSTGRES_SKIP_REASON)'; rc=$$?; \
	if [ $$rc != 0 ]; then echo "--- Temporal server log (last lines) ---"; tail -n 40 $$tmp/temporal.log; fi; \
	exit $$rc

# The RabbitMQ-cluster tests alone (private three-node clusters of the machine's
# rabbitmq-server, a node killed under load); make test runs them in the integration tier.
test-cluster: tools rabbitmq ## The RabbitMQ-cluster tests alone (three local nodes, one killed under load)
	$(GO) test -race -count=1 -tags integration -timeout 15m -run '^(TestClusterNodeLossUnderLoad|TestPublisherGetsPastAQuorumLeaderCrash|TestClusterSurvivesANodeCrash)$$' ./e2e/ ./internal/broker/ ./internal/rabbitcluster/

# The breaker outage scenario with three service processes, with and without SIGKILLs (build
# tag processes). Outside make test: on a busy 2-core machine most messages are dead-lettered
# (docs/deployment.md, Several processes); internal/testreport/outside-make-test.txt declares
# them, so that make test's list of tests not run shows them as such.
test-processes: tools temporal-server rabbitmq ## The breaker outage e2e scenario with three service processes (some killed); not part of make test
	$(GO) vet -tags 'integration processes' ./e2e/
	$(GO) test -race -count=1 -tags 'integration processes' -timeout 30m -run '^TestBreakerOutageAcrossProcesses' ./e2e/

# Temporal as two hosts (two server processes on one PostgreSQL, one membership ring), one
# SIGKILLed under load, dialled by the service or not (build tag temporalhosts).
test-temporal-hosts: tools temporal-server rabbitmq ## The e2e tests of a Temporal host lost under load (two server processes on PostgreSQL), alone; make test runs them in its PostgreSQL pass
	$(GO) vet -tags 'integration temporalhosts' ./e2e/
	$(GO) test -race -count=1 -tags 'integration temporalhosts' -timeout 30m -run '^TestTemporal(Dialled)?HostLossUnderLoad$$' ./e2e/

# The Node client's tests: npm ci into clients/node/node_modules (npm's cache under $(CACHE)),
# then node --test against the RabbitMQ at RABBITMQ_URL. Before test-integration, whose e2e
# test runs the client's example consumer from those node_modules. Without node the tier is
# skipped with a message, except under CI (CI set to anything but false or 0), where it fails.
test-node: rabbitmq ## The Node client's tests (clients/node, node --test) against the real RabbitMQ
	@$(CI_TRUE); \
	if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then \
		if ci_true; then echo "test-node: node and npm are required under CI (CI=$$CI)" >&2; exit 1; fi; \
		echo "== Node client tests: SKIPPED, node or npm not found (install Node.js 18 or later)"; exit 0; \
	fi; \
	echo "== Node client tests (node $$(node --version))"; \
	cd clients/node && npm ci --no-audit --no-fund --loglevel=error --cache "$(CACHE)/npm" && node --test

# Runs every Fuzz target of the tree, $(1) each, with the build tags its file needs
# (testreport -fuzz-targets reads each file's //go:build line: go test -list without tags
# misses the targets of tagged files); failures are collected, inputs that fail are kept
# under the package's testdata/fuzz. A target go test does not find with those tags fails
# the run. A run that fails only on the fuzzing engine's own deadline (seen on a loaded
# 2-core machine, with no failing input) is run once more.
# The broker's FuzzCheckPublishing (-tags integration) is fuzzed too: it checks
# CheckPublishing's verdict against the real RabbitMQ's for each input, on one connection per
# fuzzing process (opened before f.Fuzz), a publish of a few milliseconds per input, so
# thousands of inputs in FUZZ_TIME; it needs only the broker (RABBITMQ_URL, hence the
# rabbitmq prerequisite), not Temporal. The integration tier runs its seed corpus as well.
define fuzz_all
	@status=0; \
	targets=$$($(TESTREPORT) -fuzz-targets) || exit 1; \
	[ -n "$$targets" ] || { echo "no Fuzz targets yet"; exit 0; }; \
	while read -r dir tags t <&3; do \
		echo "== fuzz $$dir $$t for $(1)$$([ "$$tags" = -tags= ] || echo " ($$tags)")"; \
		out=$$(mktemp); $(GO) test $$tags -run '^$$' -fuzz "^$$t\$$" -fuzztime $(1) $$dir > $$out 2>&1; rc=$$?; cat $$out; \
		if grep -q 'no fuzz tests to fuzz' $$out; then \
			echo "go test $$tags $$dir found no fuzz target $$t" >&2; status=1; \
		elif [ $$rc != 0 ] && grep -q 'context deadline exceeded' $$out && ! grep -q 'Failing input written' $$out; then \
			echo "(the fuzzing engine's own deadline on a loaded machine, not a failing input: once more)"; \
			$(GO) test $$tags -run '^$$' -fuzz "^$$t\$$" -fuzztime $(1) $$dir || status=1; \
		elif [ $$rc != 0 ]; then status=1; fi; rm -f $$out; \
	done 3<<< "$$targets"; \
	exit $$status
endef

fuzz-short: rabbitmq ## Run each Fuzz target for FUZZ_TIME (10s; part of make test), with its file's build tags
	$(call fuzz_all,$(FUZZ_TIME))

fuzz: rabbitmq ## Run each Fuzz target for FUZZ_LONG_TIME (2m), with its file's build tags
	$(call fuzz_all,$(FUZZ_LONG_TIME))

# staticcheck's settings are in staticcheck.conf. The linters are file targets: a missing one
# is installed first, and one that cannot be installed fails lint.
lint: $(WORKFLOWCHECK) $(STATICCHECK) ## go vet and staticcheck (with and without -tags integration), gofmt, workflowcheck ./workflows/... ./internal/jobs/..., docker compose config
	@echo "== lint"
	$(GO) vet ./...
	$(GO) vet -tags integration ./...
	@unformatted=$$(git ls-files -co --exclude-standard '*.go' | while read -r f; do [ -f "$$f" ] && echo "$$f"; done | xargs -r gofmt -l); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:" $$unformatted >&2; exit 1; fi
	@for tool in $(STATICCHECK) $(WORKFLOWCHECK); do \
		[ -f $$tool ] && [ -x $$tool ] || { echo "$$tool is missing or not executable: make lint cannot pass without it (make tools)" >&2; exit 1; }; \
	done
	$(STATICCHECK) ./...
	$(STATICCHECK) -tags integration ./...
	$(WORKFLOWCHECK) ./workflows/... ./internal/jobs/...
	@if docker compose version >/dev/null 2>&1; then echo "docker compose config -q"; docker compose config -q; \
	else echo "docker compose is not installed: docker compose config skipped; docker-compose.yml is loaded and checked by the unit tier's deploy/compose tests (compose-go)"; fi

# The configuration reference is generated from the settings list (internal/config/settings.go); a unit
# test (config.TestConfigurationReferenceIsCurrent) fails when the committed file differs.
docs: ## Regenerate docs/configuration-reference.md from internal/config/settings.go
	$(GO) run ./internal/configdoc -o docs/configuration-reference.md

demo: ## Inject demo traffic with the starter (run `make run` in another terminal first)
	$(GO) run ./starter demo

bench: $(TEMPORAL_CLI) rabbitmq $(if $(findstring postgres,$(BENCH_FLAGS)),temporal-server) ## Benchmark: ceiling, ladder, sustained, split, burst, mixed, overload (about 45 min; flags in BENCH_FLAGS: -engine postgres, -temporal-address; cmd/bench/README.md)
	$(GO) run ./cmd/bench $(BENCH_FLAGS)

# Built, not `go run`, so that a SIGTERM reaches the soak, which then stops its processes
# and always leaves RabbitMQ running. Flags through SOAK_FLAGS, e.g. SOAK_FLAGS='-n 500 -kills 6'.
soak: tools rabbitmq $(if $(findstring postgres,$(SOAK_FLAGS)),temporal-server) ## Fault soak: 10,000 messages through the pipeline under kills, restarts and network faults (cmd/soak/README.md)
	@mkdir -p $(CACHE)/bin && $(GO) build -o $(CACHE)/bin/soak ./cmd/soak && $(CACHE)/bin/soak $(SOAK_FLAGS)

soak-cluster: tools temporal-server ## The soak past one process: 2 bridges, 2 workers, a 3-node RabbitMQ cluster, Temporal on 2 hosts on PostgreSQL; node and host kills (cmd/soak/README.md)
	@mkdir -p $(CACHE)/bin && $(GO) build -o $(CACHE)/bin/soak ./cmd/soak && $(CACHE)/bin/soak -cluster $(SOAK_FLAGS)

clean: ## Remove bin/ and coverage files
	rm -rf bin/ coverage.out coverage.html *.coverprofile
