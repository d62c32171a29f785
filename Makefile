# agentpool: a daemon that keeps coding agents warm, one per (session, agent),
# each confined to its session's git worktree.

GO        ?= go
BIN       ?= bin/agentpool
PKGS      ?= ./...
BENCHTIME ?= 1x
AGENTPOOL_HOME ?= $(CURDIR)/.agentpool

export CGO_ENABLED = 1

# make install copies the binary to $(PREFIX)/bin, so that agentpool is on
# PATH (~/.local/bin is on it in most distributions; PREFIX=/usr/local with
# sudo for every user). DESTDIR is for packagers.
PREFIX    ?= $(HOME)/.local
DESTDIR   ?=

.PHONY: build install uninstall run test bench bench-smoke lint check fuzz clean vendor-xterm

# build stamps the version (git describe) and the commit into the binary,
# so that `agentpool version` names them even where Go records no VCS
# information (GOFLAGS=-buildvcs=false); outside a git checkout the
# version is dev and the revision is left out.
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS  := -X main.version=$(VERSION) -X main.revision=$(REVISION)

# The launcher of confined processes (agentpool-sandbox) goes beside the
# daemon's binary, from the same build: the daemon checks that and falls
# back to its own binary otherwise.
build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/agentpool
	$(GO) build -ldflags '$(LDFLAGS)' -o $(dir $(BIN))agentpool-sandbox ./cmd/agentpool-sandbox

install: build
	install -d '$(DESTDIR)$(PREFIX)/bin'
	install -m 0755 $(BIN) '$(DESTDIR)$(PREFIX)/bin/agentpool'
	install -m 0755 $(dir $(BIN))agentpool-sandbox '$(DESTDIR)$(PREFIX)/bin/agentpool-sandbox'
	@echo "installed $(DESTDIR)$(PREFIX)/bin/agentpool"
	@case ":$$PATH:" in *':$(PREFIX)/bin:'*) ;; *) echo "note: $(PREFIX)/bin is not on your PATH; add it, e.g.: export PATH=\"$(PREFIX)/bin:\$$PATH\"" ;; esac

uninstall:
	rm -f '$(DESTDIR)$(PREFIX)/bin/agentpool' '$(DESTDIR)$(PREFIX)/bin/agentpool-sandbox'

run: build
	AGENTPOOL_HOME=$(AGENTPOOL_HOME) ./$(BIN) serve

test:
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 15m $(PKGS)

# Benchmarks never run in the test gate. BENCH selects, e.g. make bench BENCH=PromptWarm.
BENCH ?= .
bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count 5 -timeout 60m $(PKGS)

# bench-smoke runs every benchmark once (-benchtime 1x), small (-short:
# benchmarks with a fixed workload shrink it), so that a benchmark that no
# longer runs fails CI (.ci/run); its figures mean nothing. A benchmark that
# needs what the machine lacks (root, a network, a real agent) skips.
bench-smoke:
	$(GO) test -short -run '^$$' -bench . -benchtime $(BENCHTIME) -timeout 20m $(PKGS)

# test-real installs the real Claude Code from npm into a temporary prefix,
# records it anew in a terminal against a mock of the Messages API on
# 127.0.0.1 (backends/pty/testdata/recordings) and replays the recordings
# through the PTY backend. Opt-in: it needs the npm registry.
CLAUDE_CODE_VERSION ?= latest
.PHONY: test-real
test-real:
	@set -e; prefix=$$(mktemp -d); trap 'rm -rf "$$prefix"' EXIT; \
	npm install --silent --prefix "$$prefix" @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION); \
	bin=$$(ls "$$prefix"/node_modules/@anthropic-ai/claude-code-*/claude | head -n 1); \
	echo "recording $$("$$bin" --version)"; \
	AGENTPOOL_CLAUDE_BIN="$$bin" AGENTPOOL_RECORD_DIR=$(CURDIR)/backends/pty/testdata/recordings \
		$(GO) test -count=1 -v -run 'TestRecordClaude' ./backends/pty/; \
	$(GO) test -race -count=1 -run 'Claude|EmulatorMatchesTmux' ./backends/pty/

# test-real-acp installs real ACP agents from npm into a temporary prefix
# (claude-agent-acp, codex-acp, gemini-cli, copilot, qwen-code, opencode),
# records each one's ACP conversation against a mock of its model API on
# 127.0.0.1 into backends/acp/testdata/transcripts/<agent>-<version>.jsonl,
# and replays every transcript through the ACP backend. The recorders run in a
# network namespace of their own with only loopback (unshare), so an agent
# can reach nothing but the mocks. Opt-in: it needs the npm registry.
# qwen-code 0.24 and later need Node 22: on an older Node the newest 0.15.
CLAUDE_ACP_VERSION ?= latest
CODEX_ACP_VERSION  ?= latest
GEMINI_CLI_VERSION ?= latest
COPILOT_VERSION    ?= latest
OPENCODE_VERSION   ?= latest
QWEN_CODE_VERSION  ?= $(shell node -e 'process.stdout.write(+process.versions.node.split(".")[0] >= 22 ? "latest" : "0.15")' 2>/dev/null)
.PHONY: test-real-acp
test-real-acp:
	@set -e; prefix=$$(mktemp -d); trap 'rm -rf "$$prefix"' EXIT; \
	npm install --silent --no-fund --no-audit --prefix "$$prefix" \
		@agentclientprotocol/claude-agent-acp@$(CLAUDE_ACP_VERSION) \
		@zed-industries/codex-acp@$(CODEX_ACP_VERSION) \
		@google/gemini-cli@$(GEMINI_CLI_VERSION) \
		@github/copilot@$(COPILOT_VERSION) \
		@qwen-code/qwen-code@$(QWEN_CODE_VERSION) \
		opencode-ai@$(OPENCODE_VERSION); \
	$(GO) test -c -o "$$prefix/acp.test" ./backends/acp/; \
	bin="$$prefix/node_modules/.bin"; cd backends/acp && \
	AGENTPOOL_CLAUDE_ACP_BIN="$$bin/claude-agent-acp" AGENTPOOL_CODEX_ACP_BIN="$$bin/codex-acp" \
	AGENTPOOL_GEMINI_BIN="$$bin/gemini" AGENTPOOL_COPILOT_BIN="$$bin/copilot" AGENTPOOL_QWEN_BIN="$$bin/qwen" \
	AGENTPOOL_OPENCODE_BIN="$$bin/opencode" \
	AGENTPOOL_NPM_PREFIX="$$prefix" AGENTPOOL_TRANSCRIPT_DIR=$(CURDIR)/backends/acp/testdata/transcripts \
		unshare --net --map-root-user sh -c 'ip link set lo up && exec "$$0" -test.count=1 -test.v -test.run "TestRecord(Claude|Codex|Gemini|Copilot|Qwen|Opencode)ACP"' "$$prefix/acp.test"; \
	cd $(CURDIR) && $(GO) test -race -count=1 -run 'TestReplayRealAgentTranscripts|TestReplayTranscript' ./backends/acp/ ./backends/agenttest/

# test-real-confined installs the same real ACP agents from npm (global
# packages in a temporary prefix, as `npm install -g` lays them out; one
# that fails to install is skipped) and runs each through the built daemon,
# confined as every agent is, with its built-in provider and its keys in
# the daemon's environment, against a mock of its model API: over a
# forwarded loopback port ("localhost:PORT"), and by a name through the
# egress proxy (plain HTTP and HTTPS, "api.mock.test:PORT"). It runs in a
# network namespace of its own, whose loopback also holds the mock's
# public-looking address (198.51.100.7, TEST-NET-2) and whose /etc/hosts
# names it, so nothing leaves the machine. REAL_RUN narrows the subtests
# (REAL_RUN=/gemini, REAL_RUN=/codex/forward). Opt-in: it needs the npm
# registry, unshare(1) and ip(8).
.PHONY: test-real-confined
test-real-confined:
	@set -e; prefix=$$(mktemp -d); trap 'rm -rf "$$prefix"' EXIT; \
	for pkg in @agentclientprotocol/claude-agent-acp@$(CLAUDE_ACP_VERSION) @zed-industries/codex-acp@$(CODEX_ACP_VERSION) \
		@google/gemini-cli@$(GEMINI_CLI_VERSION) @github/copilot@$(COPILOT_VERSION) \
		@qwen-code/qwen-code@$(QWEN_CODE_VERSION) opencode-ai@$(OPENCODE_VERSION); do \
		npm install -g --silent --no-fund --no-audit --prefix "$$prefix" "$$pkg" || echo "test-real-confined: $$pkg did not install; skipped"; \
	done; \
	$(GO) test -c -o "$$prefix/e2e.test" ./cmd/agentpool/; \
	{ cat /etc/hosts; echo "198.51.100.7 api.mock.test"; } > "$$prefix/hosts"; \
	bin="$$prefix/bin"; set_bin() { if [ -x "$$bin/$$2" ]; then export "$$1=$$bin/$$2"; fi; }; \
	set_bin AGENTPOOL_CLAUDE_ACP_BIN claude-agent-acp; set_bin AGENTPOOL_CODEX_ACP_BIN codex-acp; \
	set_bin AGENTPOOL_GEMINI_BIN gemini; set_bin AGENTPOOL_COPILOT_BIN copilot; \
	set_bin AGENTPOOL_QWEN_BIN qwen; set_bin AGENTPOOL_OPENCODE_BIN opencode; \
	cd cmd/agentpool && unshare --net --mount --map-root-user sh -c \
		'ip link set lo up && ip addr add 198.51.100.7/32 dev lo && mount --bind "$$1" /etc/hosts && \
		exec "$$0" -test.count=1 -test.v -test.timeout 60m -test.run "TestRealAgentsConfined$(REAL_RUN)"' \
		"$$prefix/e2e.test" "$$prefix/hosts"

lint:
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

check: lint
	$(GO) mod tidy -diff

clean:
	rm -rf bin

# The web page's terminal library, vendored in $(XTERM_DIR) beside its
# licence: vendor-xterm fetches the pinned version with npm pack, checks the
# tarball against the pinned integrity (the registry's sha512) and replaces
# the files. To move to a new version, set both: the integrity is in
# `npm view @xterm/xterm@VERSION dist.integrity`. make run and make test
# need neither Node nor npm.
XTERM_VERSION   ?= 6.0.0
XTERM_INTEGRITY ?= sha512-TQwDdQGtwwDt+2cgKDLn0IRaSxYu1tSUjgKarSDkUM0ZNiSRXFpjxEsvc/Zgc5kq5omJ+V0a8/kIM2WD3sMOYg==
XTERM_DIR       := web/static/vendor/xterm

vendor-xterm:
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	(cd "$$tmp" && npm pack --silent @xterm/xterm@$(XTERM_VERSION) >/dev/null); \
	tgz="$$tmp/xterm-xterm-$(XTERM_VERSION).tgz"; \
	got="sha512-$$(openssl dgst -sha512 -binary "$$tgz" | base64 -w0)"; \
	if [ "$$got" != "$(XTERM_INTEGRITY)" ]; then echo "vendor-xterm: integrity mismatch: got $$got, want $(XTERM_INTEGRITY)" >&2; exit 1; fi; \
	tar -xzf "$$tgz" -C "$$tmp"; \
	mkdir -p $(XTERM_DIR); \
	cp "$$tmp/package/lib/xterm.mjs" "$$tmp/package/css/xterm.css" "$$tmp/package/LICENSE" $(XTERM_DIR)/; \
	printf '@xterm/xterm %s\nintegrity %s\nfiles: lib/xterm.mjs, css/xterm.css, LICENSE (unchanged); refresh with: make vendor-xterm\n' \
		'$(XTERM_VERSION)' '$(XTERM_INTEGRITY)' > $(XTERM_DIR)/VERSION; \
	echo "vendored @xterm/xterm $(XTERM_VERSION) in $(XTERM_DIR)"
