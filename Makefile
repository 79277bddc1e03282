# memwatch — the two commands a newcomer needs are `make demo` and `make test`.
GO      ?= go
BIN     := bin/memwatch
VERSION ?= $(shell v=$$(git describe --tags --match "v[0-9]*" 2>/dev/null) && echo $${v#v} || echo 0.0.0+$$(git rev-parse --short HEAD 2>/dev/null || echo dev))
LDFLAGS := -s -w -X main.version=$(VERSION)
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME ?= 30s
# The race detector needs cgo, hence a C compiler; on a machine with only Go
# the tests still run, without it, and say so.
RACE := $(shell command -v "$$($(GO) env CC)" >/dev/null 2>&1 && echo -race)

.PHONY: fixtures build install test race-e2e demo bench bench-relevance lint fuzz soak stress package e2e mcp-e2e browser clean

# Three binaries: memwatchd (cmd/memwatchd), every command (the daemon,
# MCP, install, ...); memwatch (cmd/memwatch), the client: recall, show,
# log, versions, status and version in a few milliseconds, every other
# command by running memwatchd beside it; and memwatch-search
# (cmd/memwatch-search), the search the client runs when no daemon
# answers, which starts in a third of memwatchd's time (it links no
# replica, metrics, MCP or service code). The client is static
# (CGO_ENABLED=0: no dynamic loader at each start, 0.7 ms of its 2.5);
# memwatchd and memwatch-search keep cgo where there is a C compiler, for
# the system's user lookups (NSS).
build:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)d ./cmd/memwatchd
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)-search ./cmd/memwatch-search
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/memwatch

# make install [PREFIX=DIR]: memwatch, memwatchd and memwatch-search in PREFIX/bin, a man
# page per command in PREFIX/share/man/man1, and bash, zsh and fish
# completion where those shells look under PREFIX. PREFIX is /usr/local
# as root, else ~/.local (put ~/.local/bin on PATH).
PREFIX ?= $(if $(filter 0,$(shell id -u)),/usr/local,$(HOME)/.local)
install: build
	@docs=$$(mktemp -d) && trap 'rm -rf "$$docs"' EXIT && \
	$(GO) run -tags gendocs -ldflags "-X main.version=$(VERSION)" ./cmd/memwatchd gen-docs "$$docs" >/dev/null && \
	install -d "$(DESTDIR)$(PREFIX)/bin" "$(DESTDIR)$(PREFIX)/share/man/man1" "$(DESTDIR)$(PREFIX)/share/bash-completion/completions" \
		"$(DESTDIR)$(PREFIX)/share/zsh/site-functions" "$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d" && \
	install -m 0755 $(BIN) $(BIN)d $(BIN)-search "$(DESTDIR)$(PREFIX)/bin/" && \
	install -m 0644 "$$docs"/man1/*.1 "$(DESTDIR)$(PREFIX)/share/man/man1/" && \
	install -m 0644 "$$docs"/completions/memwatch.bash "$(DESTDIR)$(PREFIX)/share/bash-completion/completions/memwatch" && \
	install -m 0644 "$$docs"/completions/_memwatch "$(DESTDIR)$(PREFIX)/share/zsh/site-functions/_memwatch" && \
	install -m 0644 "$$docs"/completions/memwatch.fish "$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/memwatch.fish" && \
	echo "installed memwatch, memwatchd and memwatch-search in $(DESTDIR)$(PREFIX)/bin, man pages (man memwatch-recall) and completion under $(DESTDIR)$(PREFIX)/share"
	@case ":$$PATH:" in *":$(PREFIX)/bin:"*) ;; *) echo "note: $(PREFIX)/bin is not on your PATH: add it (export PATH=\"$(PREFIX)/bin:\$$PATH\")";; esac

# The process-level tests (test/e2e, most of the run's time) are named
# first, so go test builds and starts them first; the other packages run
# beside them.
test:
	$(GO) vet ./...
	@[ -n "$(RACE)" ] || echo "note: no C compiler ($$($(GO) env CC)) for the race detector; running the tests without -race"
	$(GO) test $(RACE) -timeout 25m ./test/e2e ./...

# The end-to-end tests against a memwatchd built with the race detector
# too (make test runs them against the binary as it ships; the packages'
# tests have the race detector): several times slower daemons.
race-e2e:
	MEMWATCH_E2E_RACE=1 $(GO) test -race -count=1 -timeout 40m ./test/e2e

# The demo is built, then run (not go run, which ends in error on the
# Ctrl-C that stops the page); its exit status is the make's.
demo: build
	$(GO) build -o $(BIN)-demo ./cmd/memwatch-demo
	$(BIN)-demo -bin $(BIN) -dir demo

# Benchmarks, never timed tests: one run each, figures printed as a table.
bench: build
	@command -v rg >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get install -y -qq ripgrep >/dev/null 2>&1; } || echo "note: rg (ripgrep) is not installed: recall is compared with grep only"
	$(GO) test -run '^$$' -bench . -benchtime 500ms -benchmem ./...
	$(GO) run ./cmd/memwatch-bench -bin $(BIN)

# Recall's relevance alone: LoCoMo (../shared/recall/locomo10.zip) written as
# agents' session logs, every question asked through the real CLI, evidence
# recall@10 beside plain BM25. RELEVANCE_DATA=DIR measures another set in
# LoCoMo's format.
RELEVANCE_DATA ?= ../shared/recall/locomo10.zip
bench-relevance: build
	$(GO) run ./cmd/memwatch-bench -bin $(BIN) -only relevance -relevance-data $(RELEVANCE_DATA)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOOS=darwin $(GO) vet ./... # the packages are built for macOS too
	$(GO) mod tidy -diff
	$(GO) run $(STATICCHECK) ./...

# Every fuzz target for FUZZTIME each (long: not part of make test).
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for t in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$t"; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

# Every kind of agent writer (read-modify-write in place, by rename and
# both, truncate-and-rewrite, O_APPEND reopened per entry, held O_APPEND and
# O_WRONLY descriptors) at 10x the writes against the real daemon and the
# rewrite: a table of writes, compactions, conflicts, kept copies and
# writes missing from the live file (which must be 0).
stress:
	MEMWATCH_WRITERS_SCALE=10 $(GO) test -run 'TestAgentWritesStayLive|TestWritersLoseNothing' -count=1 -timeout 1h -v ./test/e2e ./rewrite

# The long runs: the crash-consistency test at full size (2,000 kills, an
# agent writing throughout), every kind of writer at 50x the size against the
# rewrite and the daemon, the watcher overflow test, the tenants' bounds
# at the issue's size (a 400 MiB log, 200,000 directories) and a root of
# 1,000,000 session logs caught up beside another, a burst of 200,000
# logs captured whole before status says nothing is pending, and 100,000
# session logs deleted at once (make test: 5,000).
soak:
	MEMWATCH_CRASH_ITERATIONS=2000 MEMWATCH_WRITERS_SCALE=50 MEMWATCH_TENANTS_LOG_MIB=400 MEMWATCH_TENANTS_DIRS=200 MEMWATCH_MANY_FILES=1000000 MEMWATCH_BURST_LOGS=200000 MEMWATCH_MASS_DELETE_FILES=100000 $(GO) test $(RACE) -run 'TestMassDeleteBatched|TestCrashConsistency|TestOverflow|TestWritersLoseNothing|TestAgentWritesStayLive|TestTenantsBounded|TestManyFilesCaughtUpAlone|TestBurstCapturedWhole' -timeout 4h -v ./test/e2e ./watcher ./rewrite

# memwatch mcp driven by an independent client: the official TypeScript MCP
# SDK, installed from npm into test/mcp-node (skipped when node is absent);
# then the MCP conformance suite (with Node 24 from npm) against the
# daemon's /mcp.
mcp-e2e: build
	@if ! command -v node >/dev/null || ! command -v npm >/dev/null; then \
		echo "skipping mcp-e2e: node and npm are not installed (the client is the TypeScript MCP SDK)"; \
	else \
		cd test/mcp-node && npm ci --no-audit --no-fund --silent && node client.mjs $(CURDIR)/$(BIN) && \
		cd $(CURDIR) && MEMWATCH_CONFORMANCE=$(CURDIR)/test/mcp-node $(GO) test -count=1 -run TestMCPConformance -v ./test/e2e; \
	fi

# The review pages in a real headless Chromium against the real daemon,
# screenshots of each page in test-output/ (Debian's chromium, installed
# here as root; make test skips the test, saying so, without one).
browser:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && (apt-get update -qq && apt-get install -y -qq chromium) >/dev/null 2>&1; } || echo "note: no chromium and no way to install it here: the browser test will skip"
	mkdir -p test-output
	$(GO) test -run 'TestReviewPages|TestReviewPageWeight' -count=1 -v -artifacts -outputdir $(CURDIR)/test-output ./test/e2e

# Agent session fixtures written by the real programs (Claude Code, Codex,
# Gemini CLI, OpenClaw 2026.9.6 and 2026.7.1, at pinned versions from npm),
# run offline against a local fake of their model API, a turn at a time
# (needs node, npm and, to tell rewrites from appends, strace): see
# session/testdata/agents/SOURCES.md. AGENTS="codex" records one.
fixtures:
	test/fixtures/record.sh $(AGENTS)
	$(GO) test ./session -run TestAgentFormats -update

# .deb, .rpm, tarballs (linux, darwin; amd64, arm64) and a Homebrew formula in dist/.
package:
	VERSION=$(VERSION) packaging/package.sh

# The packaged service under a real systemd (systemd-nspawn, as root).
e2e: package
	packaging/test/e2e.sh

clean:
	rm -rf bin dist demo test-output
