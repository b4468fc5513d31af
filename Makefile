# wasmhost build, test and release checks. `make help` lists the targets.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

GO        ?= go
BIN       := bin/wasmhost
STATICCHECK ?= $(shell command -v staticcheck 2>/dev/null || echo $(HOME)/go/bin/staticcheck)
STATICCHECK_VERSION := 2025.1.1
FUZZTIME  ?= 5s

# Plugins built with the standard Go toolchain (wasip1, c-shared). Each
# .wasm is committed beside its source and must be byte-reproducible.
GO_PLUGINS := plugins/policy-default/policy-default.wasm \
              testplugins/prefix-policy/prefix-policy.wasm

.PHONY: help build plugins go-plugins wat-plugins as-plugins test gotest conformance \
        fuzz bench lint check run tools

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

build: ## build bin/wasmhost
	$(GO) build -trimpath -o $(BIN) ./cmd/wasmhost

plugins: go-plugins wat-plugins as-plugins ## rebuild every committed .wasm from source

# Each output is deleted first: go build finds the build ID that wasmhost
# pack keeps in the packed file and would otherwise take the committed file
# for up to date without linking. Each is then packed (wasmhost pack, through internal/wasmpack/cmd/wasmpack,
# which does not embed the plugins being built: Go's linker writes tens of
# thousands of data segments, which every load decodes one by one).
go-plugins:
	@for w in $(GO_PLUGINS); do \
	  d=$$(dirname $$w); echo "go wasip1 $$w"; \
	  rm -f $$w; \
	  (cd $$d && GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -buildvcs=false -o $$(basename $$w) .); \
	  $(GO) run ./internal/wasmpack/cmd/wasmpack $$w; \
	done
	@for d in testplugins/hostile-go/*/; do \
	  [ -f $$d/main.go ] || continue; n=$$(basename $$d); echo "go wasip1 $$d$$n.wasm"; \
	  rm -f $$d$$n.wasm; \
	  (cd $$d && GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -buildvcs=false -o $$n.wasm .); \
	  $(GO) run ./internal/wasmpack/cmd/wasmpack $$d$$n.wasm; \
	done

wat-plugins: tools
	@if [ -f testplugins/wat/build.sh ]; then bash testplugins/wat/build.sh; fi

as-plugins:
	@if [ -f testplugins/policy-default-as/build.sh ]; then bash testplugins/policy-default-as/build.sh; fi

tools: ## install the build tools a fresh machine lacks (wat2wasm, staticcheck)
	@command -v wat2wasm >/dev/null || { \
	  echo "installing wabt (wat2wasm)"; \
	  (apt-get update -qq && apt-get install -y -qq wabt) >/dev/null || \
	  (sudo apt-get update -qq && sudo apt-get install -y -qq wabt) >/dev/null; }
	@[ -x "$(STATICCHECK)" ] || $(GO) install honnef.co/go/tools/cmd/staticcheck@latest

test: gotest fuzz conformance ## go test -race ./..., a bounded run of each fuzz target, the golden suites

gotest:
	$(GO) test -race -count=1 -timeout 30m ./...

conformance: build ## run the golden suites against the default, native-equivalent and test plugins
	$(BIN) conformance conformance/golden/default
	@if [ -f testplugins/prefix-policy/prefix-policy.wasm ]; then \
	  $(BIN) conformance --plugin testplugins/prefix-policy/prefix-policy.wasm testplugins/prefix-policy/golden; fi
	@if [ -f testplugins/policy-default-as/policy-default-as.wasm ]; then \
	  $(BIN) conformance --plugin testplugins/policy-default-as/policy-default-as.wasm conformance/golden/default; fi

# A run that fails only with "context deadline exceeded" and writes no
# failing input is Go's own race at the end of -fuzztime (go.dev/issue/75804,
# in every Go 1.26 release, fixed in 1.27), not a finding: it is reported and
# passed over. Any other failure, or any new input under testdata/fuzz,
# fails the target.
fuzz: ## a bounded run of each fuzz target (FUZZTIME each)
	@grep -rl --include='*_test.go' '^func Fuzz' . | while read f; do \
	  pkg=./$$(dirname $$f); \
	  for t in $$(grep -o '^func Fuzz[A-Za-z0-9_]*' $$f | sed 's/^func //'); do \
	    echo "fuzz $$pkg $$t"; corpus=$$pkg/testdata/fuzz/$$t; log=$$(mktemp); \
	    before=$$({ ls $$corpus 2>/dev/null || true; } | wc -l); \
	    rc=0; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg >$$log 2>&1 || rc=$$?; \
	    cat $$log; \
	    if [ $$rc -ne 0 ]; then \
	      if grep -qx '    context deadline exceeded' $$log && ! grep -q 'Failing input written' $$log \
	         && [ "$$({ ls $$corpus 2>/dev/null || true; } | wc -l)" = "$$before" ]; then \
	        echo "fuzz $$t: ended by Go's -fuzztime deadline race (go.dev/issue/75804), no failing input: not a finding"; \
	      else rm -f $$log; exit 1; fi; \
	    fi; rm -f $$log; \
	  done; done

bench: ## run the benchmark suite and write BENCHMARKS.md
	$(GO) run ./internal/benchreport -out BENCHMARKS.md

lint: tools ## gofmt, go vet, staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); [ -z "$$out" ] || { echo "gofmt: $$out"; exit 1; }
	$(GO) vet ./...
	$(STATICCHECK) ./...

check: tools plugins ## fail when make plugins or go mod tidy would change a tracked file
	$(GO) mod tidy
	@git diff --exit-code --stat -- . ':!BENCHMARKS.md' || { echo "make check: the files above differ from what is committed (rebuild with make plugins / go mod tidy and commit)"; exit 1; }

run: build ## start the daemon on the example config (embedded default policy)
	$(BIN) run --config examples/demo.json --print-tokens
