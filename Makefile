# craftdns: CoreDNS with the craftstore (and later craftroute) plugins.
#
#   make            build ./coredns (static, CGO_ENABLED=0)
#   make run        build and start one member from Corefile.examples/single.Corefile
#   make run-cluster  three members on loopback from Corefile.examples/cluster/
#   make test       unit and integration tests
#   make bench      Go benchmarks and the dnsperf comparison (bench/README.md)
#   make bench-writes   committed API writes/s of a three-member group, reads meanwhile
#   make bench-rss      memory with 1,000,000 records: craftstore vs file
#   make bench-updates  RFC 2136 updates/s: craftstore cluster vs dynupdate (bench/updates/run.sh)
#   make lint       gofmt and go vet

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null)
LDFLAGS := -s -w -X main.Version=$(VERSION) -X github.com/coredns/coredns/coremain.GitCommit=$(COMMIT)
TESTTIMEOUT ?= 20m

export CGO_ENABLED := 0

.PHONY: build coredns generate run run-cluster test bench bench-updates lint clean

build: coredns

generate:
	cd cmd/coredns && $(GO) generate .

# Always hand over to go build: its cache decides what is stale.
coredns: generate
	$(GO) build -ldflags '$(LDFLAGS)' -o coredns ./cmd/coredns

run: coredns
	mkdir -p data
	./coredns -conf Corefile.examples/single.Corefile

run-cluster: coredns
	mkdir -p data/cluster
	@trap 'kill 0' INT TERM; \
	for i in 1 2 3; do ./coredns -conf Corefile.examples/cluster/member$$i.Corefile & done; \
	wait

test: coredns
	COREDNS_BINARY=$(CURDIR)/coredns $(GO) test -count=1 -timeout $(TESTTIMEOUT) ./...

bench: coredns
	$(GO) test -run '^$$' -bench . -benchmem ./plugin/...
	./bench/dnsperf.sh

# Longer runs (bench/README.md): write throughput of three members, and
# memory with a million records.
.PHONY: bench-writes bench-rss
bench-writes: coredns
	./bench/writes.sh

bench-rss: coredns
	./bench/rss.sh

bench-updates: coredns
	./bench/updates/run.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

clean:
	rm -f coredns
	rm -rf data
