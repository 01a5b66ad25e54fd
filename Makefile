# craftdns: CoreDNS with the craftstore and craftroute plugins.
#
#   make            build ./coredns (static, CGO_ENABLED=0) with the plugins of plugin.cfg
#   make run        build and start one member from Corefile.examples/single.Corefile
#   make run-cluster  three members on loopback from Corefile.examples/cluster/
#   make image      the container image craftdns:dev (deploy/docker/Dockerfile) with this machine's Docker
#   make run-tls    three members whose Raft transport is mutual TLS, and a router asking them over DNS over TLS (Corefile.examples/tls/)
#   make run-dnssec one member signing example.org online: DNS 127.0.0.1:1093, API 127.0.0.1:8093 (Corefile.examples/dnssec.Corefile)
#   make run-sharded  two shards of three members and a craftroute router (Corefile.examples/sharded/)
#   make test       unit and integration tests (with the nested test modules integration/acme and deploy/kubernetes/check),
#                   after .ci/deps installs the tools they need (as root; SKIP_DEPS=1 skips that)
#   make test-race  the plugins' and internal/'s tests under the race detector
#   make chaos      the chaos suite for CHAOS_DURATION (30m): faults drawn from CHAOS_SEED (0: random,
#                   printed) against real members, histories checked with porcupine (bench/chaos.md);
#                   CHAOS_RUN='^TestChaosSharded$' runs only the sharded set-up
#   make dropin     add craftstore and craftroute to a stock CoreDNS v1.15.0 source tree as the
#                   README says, build it and check it (fetches CoreDNS's whole module graph)
#   make bench      Go benchmarks and the dnsperf comparison (bench/README.md)
#   make bench-writes   committed API writes/s of a three-member group, reads meanwhile
#   make bench-writes-tls  committed API writes/s with the Raft transport plain vs mutual TLS (raft_tls)
#   make bench-rss      memory with 1,000,000 records: craftstore vs file
#   make bench-updates  RFC 2136 updates/s: craftstore cluster vs dynupdate (bench/updates/run.sh)
#   make bench-router   craftroute's CPU per forwarded query vs dnsdist and forward (bench/router.sh)
#   make bench-dnssec   a member's CPU per signed answer vs unsigned and vs Knot's mod-onlinesign (bench/dnssec.sh)
#   make bench-txn      UPDATEs through a router: one shard vs two shards (transactions) (bench/txn.sh)
#   make bench-axfr     AXFR of 1,000,000 records: through a router over two shards vs one member (bench/axfr.sh)
#   make bench-migrate  adding and removing a shard under load, 1,000,000 records (bench/migrate.sh)
#   make bench-filters  a flood of made-up names through a router, existence filters vs none (bench/filters.sh)
#   make fuzz       every Go fuzz target of the plugins and internal/ for FUZZTIME (10m) each
#                   (CI: 30s each); what a target finds lands in its testdata/fuzz
#   make lint       gofmt and go vet

SHELL   := /bin/bash
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null)
LDFLAGS := -s -w -X main.Version=$(VERSION) -X github.com/coredns/coredns/coremain.GitCommit=$(COMMIT)
TESTTIMEOUT ?= 20m
FUZZTIME ?= 10m

export CGO_ENABLED := 0

.PHONY: build coredns deps generate image run run-cluster run-tls run-dnssec run-sharded test test-race fuzz chaos dropin bench bench-updates bench-router bench-routers bench-dnssec bench-txn bench-axfr bench-migrate bench-policy bench-paged bench-filters lint clean

# Test modules nested in this repository, each with its own go.mod (their
# dependencies stay out of the product's).
TESTMODULES := integration/acme deploy/kubernetes/check

build: coredns

generate:
	cd cmd/coredns && $(GO) generate .

# Always hand over to go build: its cache decides what is stale.
coredns: generate
	$(GO) build -ldflags '$(LDFLAGS)' -o coredns ./cmd/coredns

# The image's build context holds only what the image copies.
IMAGE ?= craftdns:dev
image: coredns
	rm -rf .image && mkdir -p .image/data
	cp coredns deploy/docker/Dockerfile deploy/docker/Corefile Corefile.examples/zones/example.org.zone .image/
	docker build -t $(IMAGE) .image
	@docker image inspect $(IMAGE) --format '$(IMAGE): {{.Size}} bytes'
	rm -rf .image

# The member runs in the foreground of the shell's job (Ctrl-C stops it);
# once it serves example.org (its API has the zone), the tour's first
# three commands are printed.
run: coredns
	mkdir -p data
	@./coredns -conf Corefile.examples/single.Corefile & pid=$$!; \
	trap 'kill $$pid 2>/dev/null; wait $$pid; exit 0' INT TERM; \
	for _ in $$(seq 300); do \
		{ exec 3<>/dev/tcp/127.0.0.1/8053 && printf 'GET /v1/zones/example.org HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3 && read -r -t 1 proto code _ <&3 && exec 3<&-; } 2>/dev/null; \
		[ "$${code:-}" = 200 ] && break; kill -0 $$pid 2>/dev/null || break; sleep 0.1; done; \
	if kill -0 $$pid 2>/dev/null; then printf '%s\n' \
		'' 'Try it (README.md, "A five-minute tour"):' \
		'  dig @127.0.0.1 -p 1053 www.example.org A +norec' \
		'  curl -s 127.0.0.1:8053/v1/zones/example.org/records -H '"'"'Content-Type: application/json'"'"' -d '"'"'{"add": ["hello.example.org. 300 IN A 192.0.2.7"]}'"'"'' \
		'  printf '"'"'server 127.0.0.1 1053\nzone example.org\nupdate add dyn.example.org. 60 A 192.0.2.8\nsend\n'"'"' | nsupdate -k Corefile.examples/keys/update.key' \
		'Ctrl-C stops the member.' ''; fi; \
	wait $$pid

run-cluster: coredns
	mkdir -p data/cluster
	@pids=; trap 'trap - INT TERM; kill $$pids 2>/dev/null; wait; exit 0' INT TERM; \
	for i in 1 2 3; do ./coredns -conf Corefile.examples/cluster/member$$i.Corefile -pidfile data/cluster/member$$i.pid & pids="$$pids $$!"; done; \
	wait

run-tls: coredns
	mkdir -p data/tls
	@pids=; trap 'trap - INT TERM; kill $$pids 2>/dev/null; wait; exit 0' INT TERM; \
	for i in 1 2 3; do ./coredns -conf Corefile.examples/tls/member$$i.Corefile -pidfile data/tls/member$$i.pid & pids="$$pids $$!"; done; \
	./coredns -conf Corefile.examples/tls/router.Corefile -pidfile data/tls/router.pid & pids="$$pids $$!"; \
	wait

# One member signing example.org (Corefile.examples/dnssec.Corefile); its
# key-encryption key is made on first start.
run-dnssec: coredns
	mkdir -p data/dnssec
	@[ -f data/dnssec/kek ] || { (umask 077; head -c 32 /dev/urandom | base64 > data/dnssec/kek) && echo "made data/dnssec/kek: the key-encryption key of the zone's keys (keep it; every member of a group needs it)"; }
	./coredns -conf Corefile.examples/dnssec.Corefile

# Six members (shards a and b) and the router; the router imports
# example.org through its API, split over the shards, when they are new.
run-sharded: coredns
	mkdir -p data/sharded
	@pids=; trap 'trap - INT TERM; kill $$pids 2>/dev/null; wait; exit 0' INT TERM; \
	for m in a1 a2 a3 b1 b2 b3 router router2; do ./coredns -conf Corefile.examples/sharded/$$m.Corefile -pidfile data/sharded/$$m.pid >data/sharded/$$m.log 2>&1 & pids="$$pids $$!"; done; \
	echo "shard a: DNS 127.0.0.1:1161-1163, API :8161-8163; shard b: DNS :1171-1173, API :8171-8173"; \
	echo "logs in data/sharded/*.log, PIDs in data/sharded/*.pid, members' data in data/sharded/{a,b}{1,2,3}"; \
	echo "router 1: DNS 127.0.0.1:1153, API 127.0.0.1:8153 (GET /v1/shards), ready :8250, metrics :9253"; \
	echo "router 2: DNS 127.0.0.1:1154, API 127.0.0.1:8154, ready :8251, metrics :9254; Ctrl-C stops all"; \
	wait

# The chaos suite's short run goes through integration/chaos.sh, which gives
# it a network namespace of its own for its loss faults.
test: deps coredns
	COREDNS_BINARY=$(CURDIR)/coredns $(GO) test -count=1 -timeout $(TESTTIMEOUT) -skip '^TestChaos(Shard|Sharded)$$' ./...
	COREDNS_BINARY=$(CURDIR)/coredns ./integration/chaos.sh 45s
	for m in $(TESTMODULES); do \
		(cd $$m && COREDNS_BINARY=$(CURDIR)/coredns $(GO) test -count=1 -timeout $(TESTTIMEOUT) ./...) || exit 1; \
	done

# The tools the tests need (.ci/deps): installed with apt-get as root, else
# named with the command that installs them. SKIP_DEPS=1 skips the check.
deps:
	./.ci/deps

# The race detector over the plugins and internal/ (it needs cgo and a C
# compiler; .ci/run installs gcc when it is missing).
test-race:
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout $(TESTTIMEOUT) ./plugin/... ./internal/...

# Every fuzz target (go test -list '^Fuzz') of the plugins and internal/,
# one after the other, each for FUZZTIME; the seed corpora are the f.Add
# calls and testdata/fuzz. .ci/fuzz prints executions per target at the end.
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) ./.ci/fuzz

dropin:
	./integration/dropin/dropin.sh

# The long chaos run; make test runs a short one. Summary and, on a
# violation, porcupine's visualization in data/chaos/.
CHAOS_DURATION ?= 30m
CHAOS_SEED     ?= 0
chaos: coredns
	mkdir -p data/chaos
	COREDNS_BINARY=$(CURDIR)/coredns ./integration/chaos.sh $(CHAOS_DURATION) $(CHAOS_SEED) $(CURDIR)/data/chaos

bench: coredns
	$(GO) test -run '^$$' -bench . -benchmem ./plugin/...
	./bench/dnsperf.sh

# Longer runs (bench/README.md): write throughput of three members, and
# memory with a million records.
.PHONY: bench-writes bench-writes-tls bench-rss
bench-writes: coredns
	./bench/writes.sh

bench-writes-tls: coredns
	./bench/writes-tls.sh

bench-rss: coredns
	./bench/rss.sh

bench-updates: coredns
	./bench/updates/run.sh

bench-router: coredns
	./bench/router.sh

bench-dnssec: coredns
	./bench/dnssec.sh

bench-txn: coredns
	./bench/txn.sh

# Two routers over two shards of three members, this build against
# BEFORE_BINARY (a baseline build) in one run.
bench-routers: coredns
	./bench/routers.sh

bench-axfr: coredns
	./bench/axfr.sh

bench-migrate: coredns
	./bench/migrate.sh

bench-policy: coredns
	./bench/policy.sh

bench-paged: coredns
	./bench/paged.sh

bench-filters: coredns
	./bench/filters.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	for m in $(TESTMODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done

clean:
	rm -f coredns
	rm -rf data
