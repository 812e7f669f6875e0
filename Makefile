# pacer — budget-pacing daemon. `make help` lists the targets.

GO        ?= go
BIN       := bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
PREFIX    ?= /usr/local
DESTDIR   ?=
# The revision bench-scale runs the ledger scripts' cost beside (the
# scripts before a lease call read only the fields its path uses, hashed
# five arguments into its history, and a busy shard's done became a
# hashtable).
BENCH_BASE ?= b170891

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@if [ -t 1 ]; then on='\033[36m'; off='\033[0m'; else on=; off=; fi; \
	awk -v on="$$on" -v off="$$off" 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %s%-12s%s %s\n", on, $$1, off, $$2}' $(MAKEFILE_LIST)

.PHONY: deps
deps: ## Install what the tests and the dev stack need (redis-server, the compat suite's clients) if missing.
	@scripts/deps.sh

.PHONY: build
build: ## Build pacerd, pacerctl, pacersim and pacer-dev into bin/ (lists packages as they compile).
	@echo "go build ./cmd/... -> $(BIN)/ (a first build compiles etcd and NATS: a minute or two)"
	@$(GO) build -v -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

.PHONY: run
run: build ## Bring up a local fleet in .run/ (RUN_ARGS='--hosts 2 --nats-port 24222' to change it).
	@scripts/deps.sh run
	@scripts/run-dev.sh $(RUN_ARGS)

.PHONY: test
test: deps ## Run every test with -race, a line per package as it finishes (PKGS=./transport/ for some); then the latency comparison alone.
	PACER_TEST_LATENCY_LATER=1 $(GO) run ./internal/tools/testsum -race -count=1 -timeout 45m $(or $(PKGS),./...)
	$(GO) run ./internal/tools/testsum -race -count=1 -timeout 10m -run 'TestWellBehavedClientThroughAttacks' ./transport/

.PHONY: soak
soak: deps ## Long model-based and fault runs, every pair of a budget cut's interleavings, 12 SIGKILLs of two pacerds in 3 minutes, a 60-s-old AOF copy restored under fresh pacerds and recovered from PostgreSQL, 10,000 hostile connections queueing 1 MB MULTIs on each socket server (SEEDS=2000 by default; over an hour on 2 cores).
	@mkdir -p .run; PACER_MODEL_SEEDS=$${SEEDS:-2000} PACER_MODEL_FIRST_SEED=$${FIRST_SEED:-1000} \
		$(GO) test -race -count=1 -timeout 6h -run 'TestModel|Fault' -v ./daemon/ > .run/soak.log 2>&1; \
		rc=$$?; PACER_CUT_ALL_PAIRS=1 $(GO) test -race -count=1 -timeout 1h -run 'TestCutHolds' -v ./lease/ >> .run/soak.log 2>&1 || rc=1; \
		PACER_SOAK_KILLS=1 $(GO) test -count=1 -timeout 20m -run 'TestSIGKILLLoopRealProcesses' -v ./cmd/pacerd/ >> .run/soak.log 2>&1 || rc=1; \
		PACER_SOAK_RESTORE=1 $(GO) test -count=1 -timeout 20m -run 'TestAOFRestoreUnderFreshPacerds' -v ./cmd/pacerd/ >> .run/soak.log 2>&1 || rc=1; \
		PACER_SOAK_HOSTILE=1 $(GO) test -count=1 -timeout 30m -run 'TestHostileConnectionsMemory' -v ./cmd/pacerd/ >> .run/soak.log 2>&1 || rc=1; \
		grep -E '^(---|ok|FAIL|PASS)|histories|interleavings|seed|SIGKILLs|hostile connections|not counted' .run/soak.log | tail -40; echo "full log: .run/soak.log"; exit $$rc

.PHONY: lint
lint: ## gofmt, go vet, and staticcheck where it installs.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@if command -v staticcheck >/dev/null 2>&1; then staticcheck ./...; else echo "staticcheck not installed; skipped"; fi

.PHONY: tidy
tidy: ## go mod tidy (here and in examples/goclient), and fail if it changed anything.
	$(GO) mod tidy
	cd examples/goclient && GOWORK=off $(GO) mod tidy
	git diff --exit-code go.mod go.sum examples/goclient/go.mod examples/goclient/go.sum

.PHONY: bench
bench: deps build ## Benchmarks: Go benchmarks, pacerd vs. Redis Lua, and a simulated day (docs/img/).
	$(GO) test -run '^$$' -bench . -benchmem ./bucket/ ./daemon/ ./transport/
	@scripts/bench-resp.sh | tee docs/img/socket-results.md
	@scripts/sim-bench.sh
	@scripts/sim-tail.sh

.PHONY: bench-tail
bench-tail: deps ## The long tail: the sparse and tiny scenarios and a generated family of 50 campaigns, on its curves and on curve: auto (docs/img/tail-*; ~8 min).
	@scripts/sim-tail.sh $(or $(FAMILY),50) $(or $(SEED),7)

.PHONY: sim-seeds
sim-seeds: deps ## The tiny scenario (SCENARIO=... for another) over seeds 1-10 (FIRST=, LAST=): which keep every pacing invariant (sim-out/seeds/; ~3 min).
	@scripts/sim-seeds.sh $(or $(SCENARIO),configs/scenarios/tiny.yaml) $(or $(FIRST),1) $(or $(LAST),10)

.PHONY: bench-export
bench-export: deps ## The PostgreSQL exporter: its throughput against the old statement side by side, where PostgreSQL's time goes, its idle cost, and its lag at given rates and under the simulator's default day (docs/BENCHMARKS.md; ~25 min on 2 quiet cores).
	@scripts/bench-export.sh

.PHONY: bench-scale
bench-scale: deps ## The reconciler at 1,000, 10,000 and 100,000 campaigns (and a leader killed in its first full pass at 100,000, the next resuming, then a new leader's full pass and a step), its Cluster index reads at 10, 300 and 10,000 campaigns, one daemon at 1,000 and 10,000, a lease call's Redis CPU against BENCH_BASE: commands, time, CPU (docs/BENCHMARKS.md, Scale; over an hour: 100,000 campaigns are stored twice).
	@echo "load average: $$(cut -d' ' -f1-3 /proc/loadavg)"
	PACER_BENCH_SCALE=1 $(GO) test -run '^$$' -bench 'ReconcilerScale$$' -benchtime 5x -timeout 40m ./reconcile/
	@echo "load average: $$(cut -d' ' -f1-3 /proc/loadavg)"
	PACER_BENCH_SCALE=1 $(GO) test -run '^$$' -bench 'ReconcilerScale100k' -benchtime 2x -timeout 60m ./reconcile/
	@echo "load average: $$(cut -d' ' -f1-3 /proc/loadavg)"
	PACER_BENCH_SCALE=1 $(GO) test -run 'TestFullPassResumesAfterTheLeaderIsKilled' -v -timeout 80m ./reconcile/
	@echo "load average: $$(cut -d' ' -f1-3 /proc/loadavg)"
	PACER_BENCH_SCALE=1 $(GO) test -run 'TestClusterIndexReadsScaleWithCampaigns' -v -timeout 40m ./reconcile/
	@echo "load average: $$(cut -d' ' -f1-3 /proc/loadavg)"
	PACER_BENCH_SCALE=1 $(GO) test -run '^$$' -bench DaemonScale -benchtime 300x -timeout 40m ./daemon/
	@echo "load average: $$(cut -d' ' -f1-3 /proc/loadavg)"
	scripts/bench-ab.sh $(BENCH_BASE) ./lease/ LeaseCallRedisCPU 3 -test.benchtime=3000x

.PHONY: clean
clean: ## Remove build output and the dev stack's state.
	rm -rf $(BIN) .run

# Install layout (FHS). Binaries go under $(PREFIX); units, sysusers.d and
# tmpfiles.d snippets go where systemd looks for vendor files; the config goes
# to /etc/pacer and is never overwritten. DESTDIR stages the whole tree.
UNITDIR     ?= /lib/systemd/system
SYSUSERSDIR ?= /usr/lib/sysusers.d
TMPFILESDIR ?= /usr/lib/tmpfiles.d
INSTALL     ?= install

.PHONY: install
install: build ## Install pacerd, pacerctl, pacer-export, units, config and curves (honours DESTDIR, PREFIX).
	$(INSTALL) -D -m 0755 $(BIN)/pacerd $(DESTDIR)$(PREFIX)/bin/pacerd
	$(INSTALL) -D -m 0755 $(BIN)/pacerctl $(DESTDIR)$(PREFIX)/bin/pacerctl
	$(INSTALL) -D -m 0755 $(BIN)/pacer-export $(DESTDIR)$(PREFIX)/bin/pacer-export
	$(INSTALL) -d -m 0755 $(DESTDIR)$(UNITDIR)
	sed 's|^ExecStart=/usr/local/bin/pacerd |ExecStart=$(PREFIX)/bin/pacerd |' systemd/pacerd.service \
		> $(DESTDIR)$(UNITDIR)/pacerd.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/pacerd.service
	sed 's|^ExecStart=/usr/local/bin/pacer-export |ExecStart=$(PREFIX)/bin/pacer-export |' systemd/pacer-export.service \
		> $(DESTDIR)$(UNITDIR)/pacer-export.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/pacer-export.service
	$(INSTALL) -m 0644 systemd/pacerd.socket $(DESTDIR)$(UNITDIR)/pacerd.socket
	$(INSTALL) -D -m 0644 systemd/pacer.sysusers.conf $(DESTDIR)$(SYSUSERSDIR)/pacer.conf
	$(INSTALL) -D -m 0644 systemd/pacer.tmpfiles.conf $(DESTDIR)$(TMPFILESDIR)/pacer.conf
	$(INSTALL) -d -m 0755 $(DESTDIR)/etc/pacer/curves
	@# The operator's files in /etc/pacer are theirs: install only what is missing.
	@for src in configs/pacerd.example.yaml configs/curves/*.yaml; do \
		case $$src in configs/pacerd.example.yaml) dst=$(DESTDIR)/etc/pacer/pacerd.yaml ;; \
		*) dst=$(DESTDIR)/etc/pacer/curves/$$(basename $$src) ;; esac; \
		if [ -e "$$dst" ]; then echo "kept existing $$dst (new version: $$src)"; \
		else echo "$(INSTALL) -m 0644 $$src $$dst"; $(INSTALL) -m 0644 "$$src" "$$dst" || exit 1; fi; \
	done
	@echo "installed. Next: systemctl daemon-reload && systemd-sysusers && systemd-tmpfiles --create pacer.conf && systemctl enable --now pacerd.socket pacerd.service (systemd/README.md)"

# The Debian package (nfpm, pinned; fetched through the module proxy on first
# use). DEB_VERSION: a tag's version when HEAD is tagged vX.Y.Z, else
# 0.0.0+git<commit date>.<commit>.
DEB_VERSION ?= $(shell t=$$(git describe --tags --exact-match 2>/dev/null | sed -n 's/^v\([0-9].*\)/\1/p'); \
	if [ -n "$$t" ]; then echo "$$t"; else echo "0.0.0+git$$(git log -1 --format=%cd --date=format:%Y%m%d 2>/dev/null || echo 0).$$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"; fi)
DEB_ARCH    ?= $(shell $(GO) env GOARCH)
DIST        ?= dist
NFPM        ?= $(GO) run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2

.PHONY: deb
deb: ## Build dist/pacer_<version>_<arch>.deb (DIST=dir to change): pacerd, pacerctl, pacer-export, units, the pacer user, /etc/pacer (apt install ./dist/pacer_*.deb).
	@rm -rf $(DIST)/stage && mkdir -p $(DIST)/stage
	CGO_ENABLED=0 GOARCH=$(DEB_ARCH) $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(DIST)/stage/ ./cmd/pacerd ./cmd/pacerctl ./cmd/pacer-export
	sed 's|^ExecStart=/usr/local/bin/pacerd |ExecStart=/usr/bin/pacerd |' systemd/pacerd.service > $(DIST)/stage/pacerd.service
	sed 's|^ExecStart=/usr/local/bin/pacer-export |ExecStart=/usr/bin/pacer-export |' systemd/pacer-export.service > $(DIST)/stage/pacer-export.service
	printf 'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\nUpstream-Name: pacer\nSource: https://github.com/pacer/pacer\n\nFiles: *\nCopyright: 2026 the pacer authors\nLicense: none-stated\n No license is stated in the source repository; ask the maintainers.\n' > $(DIST)/stage/copyright
	printf 'pacer ($(DEB_VERSION)) unstable; urgency=medium\n\n  * Built from commit %s. What changed: CHANGELOG.md in the source.\n\n -- pacer maintainers <pacer@example.org>  %s\n' \
		"$$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$$(git log -1 --format=%aD 2>/dev/null || date -R)" | gzip -9n > $(DIST)/stage/changelog.gz
	sed 's|$${STAGE}|$(DIST)/stage|g' packaging/nfpm.yaml > $(DIST)/stage/nfpm.yaml
	VERSION='$(DEB_VERSION)' ARCH='$(DEB_ARCH)' $(NFPM) package --packager deb --config $(DIST)/stage/nfpm.yaml \
		--target $(DIST)/pacer_$(DEB_VERSION)_$(DEB_ARCH).deb
	@echo "built $(DIST)/pacer_$(DEB_VERSION)_$(DEB_ARCH).deb; install with: sudo apt install $(if $(filter /%,$(DIST)),,./)$(DIST)/pacer_$(DEB_VERSION)_$(DEB_ARCH).deb"

.PHONY: deb-check
deb-check: ## Build the .deb and check it: dpkg-deb -I/-c, lintian (no errors), an install into a scratch root (CI runs it).
	PACER_DEB_CHECK=1 $(GO) test -count=1 -timeout 30m -v ./packaging/

.PHONY: uninstall
uninstall: ## Remove binaries, units and snippets; keeps /etc/pacer and /var/lib/pacer.
	rm -f $(DESTDIR)$(PREFIX)/bin/pacerd $(DESTDIR)$(PREFIX)/bin/pacerctl
	rm -f $(DESTDIR)$(UNITDIR)/pacerd.service $(DESTDIR)$(UNITDIR)/pacerd.socket
	rm -f $(DESTDIR)$(SYSUSERSDIR)/pacer.conf $(DESTDIR)$(TMPFILESDIR)/pacer.conf
	@echo "kept $(DESTDIR)/etc/pacer (config, curves), /var/lib/pacer (state) and the user pacer: remove them by hand if you want them gone."
	@echo "run 'systemctl disable --now pacerd.socket pacerd.service' before, and 'systemctl daemon-reload' after."
