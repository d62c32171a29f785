# agentpool: a daemon that keeps coding agents warm, one per (session, agent),
# each confined to its session's git worktree.

GO        ?= go
BIN       ?= bin/agentpool
PKGS      ?= ./...
BENCHTIME ?= 1x
AGENTPOOL_HOME ?= $(CURDIR)/.agentpool

export CGO_ENABLED = 1

.PHONY: build run test bench lint check fuzz clean

build:
	$(GO) build -o $(BIN) ./cmd/agentpool

run: build
	AGENTPOOL_HOME=$(AGENTPOOL_HOME) ./$(BIN) serve

test:
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 15m $(PKGS)

# Benchmarks never run in the test gate. BENCH selects, e.g. make bench BENCH=PromptWarm.
BENCH ?= .
bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count 5 -timeout 60m $(PKGS)

lint:
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

check: lint
	$(GO) mod tidy -diff

clean:
	rm -rf bin
