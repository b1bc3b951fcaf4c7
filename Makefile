# talosbot — see README.md. The two commands a newcomer needs: `make demo` and `make test`.
SHELL := /bin/bash
GO ?= go
PKG := github.com/talosbot/talosbot
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
# The same flags the Dockerfile uses (a test checks they stay in sync).
LDFLAGS := -s -w -X $(PKG)/internal/version.Version=$(VERSION) -X $(PKG)/internal/version.Commit=$(COMMIT)
BUILD_FLAGS := -trimpath -ldflags "$(LDFLAGS)"
export TALOSBOT_TOOLS_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/talosbot/tools
TEST_TIMEOUT ?= 30m
DEMO_ARGS ?=

.PHONY: all build dist test test-short generate lint tools demo bench fuzz soak mutate clean

all: build

# bin/talosbot (the bot) and bin/talosbot-plugins (its built-in plugins, which the bot
# finds next to itself) are what gets installed; bin/talosbot-demo is the same bot
# with the simulator (-tags demo) for `make demo`. talosbot-plugins is built first:
# the bot records its sha256 and starts no other binary as its built-in plugins.
# A cold build takes minutes: it says what it builds and shows progress (hack/build-progress.awk).
build:
	@echo "building bin/talosbot-plugins (a first build downloads and compiles ~1000 packages: minutes) …"
	set -o pipefail; CGO_ENABLED=0 $(GO) build $(BUILD_FLAGS) -v -o bin/ ./cmd/talosbot-plugins 2>&1 | awk -f hack/build-progress.awk
	@echo "building bin/talosbot, which records the sha256 of bin/talosbot-plugins …"
	set -o pipefail; sum=$$(sha256sum bin/talosbot-plugins 2>/dev/null || shasum -a 256 bin/talosbot-plugins) && sum=$${sum%% *} && CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS) -X $(PKG)/internal/version.PluginsSHA256=$$sum" -v -o bin/ ./cmd/talosbot 2>&1 | awk -f hack/build-progress.awk
	@echo "building bin/talosbot-demo (the same bot with the simulator) …"
	set -o pipefail; sum=$$(sha256sum bin/talosbot-plugins 2>/dev/null || shasum -a 256 bin/talosbot-plugins) && sum=$${sum%% *} && CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS) -X $(PKG)/internal/version.PluginsSHA256=$$sum" -v -tags demo -o bin/talosbot-demo ./cmd/talosbot 2>&1 | awk -f hack/build-progress.awk
	@echo "built bin/talosbot, bin/talosbot-plugins and bin/talosbot-demo"

# The release archive: the two files of an install, side by side (the bot finds its plugins next to itself).
dist: build
	tar -czf bin/talosbot-$(VERSION)-$$($(GO) env GOOS)-$$($(GO) env GOARCH).tar.gz -C bin talosbot talosbot-plugins

# Builds what is missing (kube-apiserver, OpenTofu, protoc generators) into $(TALOSBOT_TOOLS_DIR).
tools:
	bash tools/build.sh
	bash hack/generators.sh

test: tools build
	set -a; [ -f "$(TALOSBOT_TOOLS_DIR)/env" ] && . "$(TALOSBOT_TOOLS_DIR)/env"; set +a; \
	export TALOSBOT_BIN=$(CURDIR)/bin/talosbot TALOSBOT_PLUGINS_BIN=$(CURDIR)/bin/talosbot-plugins TALOSBOT_DEMO_BIN=$(CURDIR)/bin/talosbot-demo; \
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./... && \
	(cd plugins/sdk && $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...) && \
	(cd examples/hello-plugin && $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...) && \
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -tags demo -run '^TestDemo' ./cmd/talosbot  # tests of demo-only code
	bash hack/fuzz.sh short

# The fast unit tier (docs/TESTING.md): every package, the slow packages without
# their whole-roll and bot-against-sim tests (they skip under -short). make test
# runs both tiers.
test-short: tools build
	set -a; [ -f "$(TALOSBOT_TOOLS_DIR)/env" ] && . "$(TALOSBOT_TOOLS_DIR)/env"; set +a; \
	export TALOSBOT_BIN=$(CURDIR)/bin/talosbot TALOSBOT_PLUGINS_BIN=$(CURDIR)/bin/talosbot-plugins TALOSBOT_DEMO_BIN=$(CURDIR)/bin/talosbot-demo; \
	$(GO) test -short -count=1 -timeout $(TEST_TIMEOUT) ./... && \
	(cd plugins/sdk && $(GO) test -short -count=1 -timeout $(TEST_TIMEOUT) ./...) && \
	(cd examples/hello-plugin && $(GO) test -short -count=1 -timeout $(TEST_TIMEOUT) ./...)

generate:
	bash hack/generators.sh
	bash hack/generate.sh
	$(GO) generate ./plugins/catalog

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt wants changes in:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd plugins/sdk && $(GO) vet ./...
	cd examples/hello-plugin && $(GO) vet ./...
	$(GO) vet -tags demo ./cmd/talosbot
	bash hack/check-packages.sh
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd plugins/sdk && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd examples/hello-plugin && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 -tags demo ./cmd/talosbot

# Options go in DEMO_ARGS, e.g. make demo DEMO_ARGS='--listen 127.0.0.1:9090 --keep --reboot-delay 20s'
# (bin/talosbot-demo demo --help lists them).
demo: build
	./bin/talosbot-demo demo $(DEMO_ARGS)

bench: tools build
	bash hack/bench.sh

fuzz:
	bash hack/fuzz.sh long

# The seeded chaos soak (docs/SOAK.md): SOAK_SCENARIOS scenarios from seed SOAK_SEED on
# (a fresh seed each run unless given); `make test` runs the short one (3 scenarios, seeds 23-25).
# Replay one: make soak SOAK_SEED=N SOAK_SCENARIOS=1. The summary goes to bin/soak-report.txt.
SOAK_SCENARIOS ?= 200
SOAK_SEED ?= $(shell date +%s)
soak: tools build
	set -a; [ -f "$(TALOSBOT_TOOLS_DIR)/env" ] && . "$(TALOSBOT_TOOLS_DIR)/env"; set +a; \
	export TALOSBOT_BIN=$(CURDIR)/bin/talosbot TALOSBOT_PLUGINS_BIN=$(CURDIR)/bin/talosbot-plugins; \
	SOAK_SEED=$(SOAK_SEED) SOAK_SCENARIOS=$(SOAK_SCENARIOS) SOAK_REPORT=$(CURDIR)/bin/soak-report.txt \
	$(GO) test -count=1 -timeout 0 -v -run '^TestSoak$$' ./internal/soak

# Mutation testing (docs/TESTING.md): gremlins v0.6.0 over the packages in
# hack/mutate-packages.txt, efficacy per package and the surviving mutants.
# Not part of `make test`. MUTATE_TIER=all adds the slow packages; MUTATE_PKGS="state approvals"
# picks listed ones. hack/mutate-rules.sh is the quick per-rule check.
MUTATE_TIER ?= fast
mutate:
	MUTATE_TIER=$(MUTATE_TIER) MUTATE_PKGS="$(MUTATE_PKGS)" bash hack/mutate.sh

clean:
	rm -rf bin
