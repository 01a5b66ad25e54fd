#!/usr/bin/env bash
# make dropin: add craftstore and craftroute to a stock CoreDNS v1.15.0
# source tree exactly as the README's "Add craftdns to your own CoreDNS
# build" says, build it, and check the result: `coredns -plugins` lists both
# plugins and the binary answers the single-member example.
#
# The source tree is a copy of CoreDNS's module from the Go module cache (the
# same files as its v1.15.0 tag). This module is not fetched from a registry
# but from this checkout: a replace directive is the one step added to the
# README's. Building stock CoreDNS needs its whole module graph (about 1.6 GB
# of module cache), which is why this is not part of make test.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
export CGO_ENABLED=0
go=${GO:-go}

work=$(mktemp -d /tmp/craftdns-dropin.XXXXXX)
pid=
cleanup() {
	if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
	chmod -R u+w "$work" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

src=$($go mod download -json github.com/coredns/coredns@v1.15.0 | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$src" ] || { echo "dropin: CoreDNS v1.15.0 not in the module cache" >&2; exit 1; }
cp -r "$src" "$work/coredns"
chmod -R u+w "$work/coredns"
cd "$work/coredns"

echo "dropin: the README's steps in $work/coredns"
# 1. plugin.cfg: craftstore beside file, craftroute beside forward.
sed -i 's|^file:file$|file:file\ncraftstore:github.com/craftdns/craftdns/plugin/craftstore|' plugin.cfg
sed -i 's|^forward:forward$|craftroute:github.com/craftdns/craftdns/plugin/craftroute\nforward:forward|' plugin.cfg
grep -n craft plugin.cfg
# 2. go get this module; (only here: it comes from this checkout, not from
# a registry, hence the replace and the version v0.0.0)
$go mod edit -replace "github.com/craftdns/craftdns=$repo"
$go get github.com/craftdns/craftdns@v0.0.0
# 3. go generate, 4. go mod tidy, 5. go build.
$go generate coredns.go
$go mod tidy
$go build -o coredns .

echo "dropin: checking ./coredns -plugins"
plugins=$(./coredns -plugins)
for p in craftstore craftroute kubernetes file; do
	grep -qx "$p" <<<"$plugins" || { echo "dropin: $p is not in -plugins" >&2; exit 1; }
done

echo "dropin: starting the single example (Corefile.examples/single.Corefile)"
run=$work/run
mkdir -p "$run/data"
ln -s "$repo/Corefile.examples" "$run/Corefile.examples"
(cd "$run" && exec "$work/coredns/coredns" -conf Corefile.examples/single.Corefile >"$run/log" 2>&1) &
pid=$!
for _ in $(seq 1 100); do
	got=$(dig @127.0.0.1 -p 1053 www.example.org A +short +norec +time=1 +tries=1 2>/dev/null || true)
	[ "$got" = 192.0.2.10 ] && break
	sleep 0.2
done
if [ "$got" != 192.0.2.10 ]; then
	echo "dropin: expected www.example.org A 192.0.2.10 from the example, got '$got'" >&2
	cat "$run/log" >&2
	exit 1
fi
echo "dropin: ok: stock CoreDNS v1.15.0 with craftstore and craftroute answers www.example.org A $got"
