# Targets for working on the relay. `make test` is the README's test command
# and what CI runs.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

.PHONY: run
run: ## start the relay with the demo world in ./data
	go run ./cmd/relay serve

# What `make build` stamps into the binary (`relay --version`, /healthz);
# each may be set on the command line (make build VERSION=v1.2.0).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
DATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)

.PHONY: build
build: ## build bin/relay with its version, commit and build date
	go build -ldflags "-X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(DATE)" -o bin/relay ./cmd/relay

.PHONY: generate
generate: ## regenerate gen/ from proto/ (buf lint included) and the world mocks in gen/mock
	./scripts/generate.sh

.PHONY: check-generate
check-generate: generate ## fail when gen/ is not what proto/ and the mocked interfaces generate
	@if [ -n "$$(git status --porcelain -- gen proto)" ]; then \
		echo "gen/ or proto/ changed when regenerated: run 'make generate' and commit" >&2; \
		git status --porcelain -- gen proto >&2; exit 1; fi

.PHONY: contract
contract: ## buf format, lint, build and breaking against baseline/contract.binpb
	./scripts/contract.sh

.PHONY: contract-baseline
contract-baseline: ## record proto/ as the baseline of buf breaking (only for a deliberate incompatible change)
	./scripts/contract.sh baseline

# Node tools (Redocly CLI) are pinned by tools/npm/package-lock.json and
# installed with `npm ci` when the lock file changes.
NPM_TOOLS := tools/npm/node_modules/.installed
$(NPM_TOOLS): tools/npm/package.json tools/npm/package-lock.json
	cd tools/npm && npm ci --no-audit --no-fund --ignore-scripts
	touch $@

.PHONY: lint-openapi
lint-openapi: $(NPM_TOOLS) ## lint gen/openapi/relay.json with Redocly CLI's recommended rules
	cd tools/npm && REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true \
		./node_modules/.bin/redocly lint --config redocly.yaml --format=stylish ../../gen/openapi/relay.json

# The TypeScript client (sdk/typescript): TypeScript, openapi-typescript and
# Node's types, pinned by its package-lock.json and installed with `npm ci`
# when the lock file changes; nothing is fetched after that. Its types are
# generated from gen/openapi/relay.json on every build, so they cannot fall
# out of step with the contract.
SDK_TS := sdk/typescript
SDK_TS_DEPS := $(SDK_TS)/node_modules/.installed
$(SDK_TS_DEPS): $(SDK_TS)/package.json $(SDK_TS)/package-lock.json
	cd $(SDK_TS) && npm ci --no-audit --no-fund --ignore-scripts
	touch $@

.PHONY: sdk-test
sdk-test: $(SDK_TS_DEPS) ## build and test the TypeScript client against a relay it starts (the Go client is tested by go test)
	go build -o bin/relay-sdk-test ./cmd/relay
	cd $(SDK_TS) && RELAY_BIN="$(CURDIR)/bin/relay-sdk-test" npm test

# The Python client (sdk/python): pure Python on Debian's packages
# (python3-requests, python3-grpcio, python3-protobuf, python3-pytest;
# protobuf-compiler and protobuf-compiler-grpc for its gRPC stubs), run by
# Debian's interpreter, which sees them. The stubs are generated into
# sdk/python/gen on every run, as the TypeScript client's types are.
PYTHON ?= /usr/bin/python3

.PHONY: sdk-python-generate
sdk-python-generate: ## generate the Python client's gRPC stubs into sdk/python/gen
	./sdk/python/generate.sh

.PHONY: sdk-python-test
sdk-python-test: sdk-python-generate ## test the Python client against a relay it starts
	go build -o bin/relay-sdk-test ./cmd/relay
	cd sdk/python && RELAY_BIN="$(CURDIR)/bin/relay-sdk-test" PYTHONPATH="$(CURDIR)/sdk/python" \
		$(PYTHON) -m pytest -p no:cacheprovider -q tests

.PHONY: image
image: ## build the container image (Containerfile) with buildah from a static binary that is run and checked first
	./scripts/image.sh

.PHONY: lint
lint: ## gofmt, go vet, staticcheck, deadcode
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted" >&2; exit 1; fi
	go vet ./...
	go tool -modfile=tools/go.mod staticcheck ./...
	@# deadcode reports functions that neither a program nor a test can
	@# reach, but exits 0 either way.
	@dead=$$(go tool -modfile=tools/go.mod deadcode -test ./...); \
	if [ -n "$$dead" ]; then echo "unreachable code: remove it or use it" >&2; echo "$$dead" >&2; exit 1; fi

# The manual's reference pages (docs/reference) are generated from the
# OpenAPI document, the commands' help, the flags and the registered metrics
# by cmd/relay-docs, which is not shipped.
.PHONY: docs
docs: ## regenerate the manual's generated pages in docs/
	go run ./cmd/relay-docs

.PHONY: docs-check
docs-check: ## fail when a generated page in docs/ is out of date
	go run ./cmd/relay-docs -check

# The manual's site: VitePress, pinned by tools/docs-site/package-lock.json
# and installed with `npm ci` when the lock file changes, builds docs/ into
# tools/docs-site/build (not committed). docs/ is copied there first, so that
# the pages find VitePress's own packages in tools/docs-site/node_modules.
# VitePress fails on a link to a missing page; check-links.mjs then checks
# every anchor, and the README's links into docs/.
DOCS_SITE := tools/docs-site
DOCS_SITE_DEPS := $(DOCS_SITE)/node_modules/.installed
$(DOCS_SITE_DEPS): $(DOCS_SITE)/package.json $(DOCS_SITE)/package-lock.json
	cd $(DOCS_SITE) && npm ci --no-audit --no-fund --ignore-scripts
	touch $@

.PHONY: docs-site
docs-site: $(DOCS_SITE_DEPS) ## build the manual's site from docs/ into tools/docs-site/build and check every link and anchor
	rm -rf $(DOCS_SITE)/build
	mkdir -p $(DOCS_SITE)/build
	cp -R docs $(DOCS_SITE)/build/docs
	rm -rf $(DOCS_SITE)/build/docs/.vitepress/cache $(DOCS_SITE)/build/docs/.vitepress/dist
	cd $(DOCS_SITE) && ./node_modules/.bin/vitepress build build/docs
	cd $(DOCS_SITE) && node check-links.mjs build/docs/.vitepress/dist ../../README.md

.PHONY: test
test: lint check-generate contract lint-openapi docs-check docs-site sdk-test sdk-python-test image ## every check and test (what CI runs)
	go test -race -count=1 -timeout 30m ./...

.PHONY: test-short
test-short: ## the Go tests only, without the race detector
	go test -count=1 ./...

.PHONY: test-load
test-load: ## run the cluster and stream tests RUNS times (10) under -race with every core kept busy; stops at the first failure
	./scripts/test-under-load.sh

.PHONY: crash
crash: ## kill the relay 200 times under writes; every acknowledged write must survive
	RELAY_CRASH_CYCLES=$${RELAY_CRASH_CYCLES:-200} go test -run '^TestCrash$$' -count=1 -v -timeout 60m ./cmd/relay/

FUZZTIME ?= 30s

.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME each (30s by default; make fuzz FUZZTIME=10m)
	@for pkg in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
		for target in $$(go test -list '^Fuzz' "$$pkg" | grep '^Fuzz'); do \
			echo "== $$pkg $$target"; \
			go test -run '^$$' -fuzz "^$$target\$$" -fuzztime "$(FUZZTIME)" "$$pkg"; \
		done; \
	done
