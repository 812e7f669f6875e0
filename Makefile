# pacer — budget-pacing daemon. `make help` lists the targets.

GO        ?= go
BIN       := bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
PREFIX    ?= /usr/local
DESTDIR   ?=

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: deps
deps: ## Install what the tests and the dev stack need (redis-server) if missing.
	@scripts/deps.sh

.PHONY: build
build: ## Build pacerd and pacerctl into bin/.
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

.PHONY: run
run: deps build ## Bring up a local stack (redis-server, pacerd, a demo campaign) in .run/.
	@scripts/run-dev.sh

.PHONY: test
test: deps ## Run every test with -race (starts its own redis-server on temp sockets).
	$(GO) test -race -count=1 -timeout 30m ./...

.PHONY: lint
lint: ## gofmt, go vet, and staticcheck where it installs.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@if command -v staticcheck >/dev/null 2>&1; then staticcheck ./...; else echo "staticcheck not installed; skipped"; fi

.PHONY: tidy
tidy: ## go mod tidy, and fail if it changed anything.
	$(GO) mod tidy
	git diff --exit-code go.mod go.sum

.PHONY: bench
bench: deps build ## Benchmarks: Go benchmarks and pacerd vs. Redis Lua with redis-benchmark.
	$(GO) test -run '^$$' -bench . -benchmem ./bucket/ ./daemon/ ./transport/
	@scripts/bench-resp.sh

.PHONY: clean
clean: ## Remove build output and the dev stack's state.
	rm -rf $(BIN) .run
