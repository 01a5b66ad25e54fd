#!/usr/bin/env bash
# writes-tls.sh: committed API writes/s of a three-member group whose Raft
# transport is plain TCP, then mutual TLS (raft_tls), in one run, side by
# side: bench/writes.sh twice (writes only, no reads), and the ratio TLS/plain
# of records/s and of p50 latency per step. Knobs: those of writes.sh
# (RECORDS, CONC, BATCH, STEP, WRITE_TO).
set -euo pipefail
BENCH=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d "${TMPDIR:-/tmp}/craftdns-bench-tls.XXXXXX")
trap 'rm -rf "$out"' EXIT
for mode in plain tls; do
	tls=0
	[ "$mode" = tls ] && tls=1
	echo "== Raft transport: $mode"
	READ_ON= RAFT_TLS=$tls "$BENCH/writes.sh" | tee "$out/$mode"
done
echo
echo "== side by side (records/s committed, p50 ms; ratio tls/plain)"
printf '%-8s %-6s %12s %12s %7s %9s %9s %7s\n' clients batch plain_rec/s tls_rec/s ratio plain_p50 tls_p50 ratio
join -j1 <(awk '$1 ~ /^[0-9]+$/ { print $1 "/" $2, $5, $6 }' "$out/plain" | sort) \
	<(awk '$1 ~ /^[0-9]+$/ { print $1 "/" $2, $5, $6 }' "$out/tls" | sort) |
	sort -t/ -k2,2n -k1,1n |
	awk '{ split($1, k, "/"); printf "%-8s %-6s %12s %12s %7.2f %9s %9s %7.2f\n", k[1], k[2], $2, $4, ($2 > 0 ? $4 / $2 : 0), $3, $5, ($3 > 0 ? $5 / $3 : 0) }'
