#!/bin/sh
# integration/chaos.sh DURATION [SEED [OUT]]: the chaos suite (TestChaosShard
# and TestChaosSharded, bench/chaos.md) for DURATION each, seed 0 drawing a
# new seed; CHAOS_RUN='^TestChaosSharded$' runs one of them, and
# CHAOS_FAULTS=migrate,kill draws only those faults. As root it runs
# inside a network namespace of its own (unshare -n, loopback up), where its
# loss faults add iptables rules; they never touch the machine's own
# namespace. Without root they are left out, except in CI (CI=true), where
# that is an error.
set -eu
cd "$(dirname "$0")/.."
dur=${1:-45s}
seed=${2:-0}
out=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/integration.test" ./integration
export COREDNS_BINARY="${COREDNS_BINARY:-$PWD/coredns}"
set -- "$tmp/integration.test" -test.run "${CHAOS_RUN:-^TestChaos(Shard|Sharded)\$}" -test.v -test.count=1 -test.timeout 4h \
	-chaos.duration="$dur" -chaos.seed="$seed" ${out:+-chaos.out="$out"} ${CHAOS_FAULTS:+-chaos.faults="$CHAOS_FAULTS"}
cd integration
if unshare -n true 2>/dev/null && command -v iptables >/dev/null; then
	# The suite checks that it runs outside this namespace before it adds a rule.
	CHAOS_HOST_NETNS=$(readlink /proc/self/ns/net)
	export CHAOS_HOST_NETNS
	unshare -n sh -c 'ip link set lo up && exec "$@"' sh "$@"
	exit
fi
if [ "${CI:-}" = true ]; then
	echo "chaos: unshare -n or iptables is missing; the loss faults need both (run as root; apt-get install iptables)" >&2
	exit 1
fi
echo "chaos: no private network namespace (unshare -n needs root) or no iptables: the loss faults are left out" >&2
"$@"
