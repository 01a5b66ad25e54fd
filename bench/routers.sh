#!/usr/bin/env bash
# routers.sh: two routers in front of two shards of three members (the
# sharded example's layout), for two binaries side by side in one run:
# BEFORE_BINARY (the baseline) and COREDNS_BINARY (./coredns). For each:
#   - existing names through router 1: qps and average latency (what the
#     members' fresh reads cost: each routed query waits for a ReadIndex
#     round with the shard's leader);
#   - a miss-heavy query file (MISSING of the names absent, repeated as
#     dnsperf wraps around the file) through router 1: the share of the
#     missing names answered from the negative cache;
#   - the same while names are written through router 2 (20 a second):
#     the cache's hit rate under writes made through another router;
#   - 200 writes through router 1, one after the other: their average
#     latency (each waits for its change notices to the routers).
# Then, for the binary under test only, every name written through router 2
# is asked through router 1 right after its write returns: it must be there
# (the baseline's routers do not agree: it is skipped for it).
#
# Knobs (environment): RECORDS (20000), QUERIES (100000 lines), MISSING
# (0.5) of MISS_LINES (2000), DURATION (seconds per run, 10), CLIENTS (dnsperf -c, 4),
# OUTSTANDING (dnsperf -q, 100), BEFORE_BINARY (required), COREDNS_BINARY.

. "$(dirname "$0")/lib.sh"

RECORDS=${RECORDS:-20000}
QUERIES=${QUERIES:-100000}
MISSING=${MISSING:-0.5}
MISS_LINES=${MISS_LINES:-2000}
DURATION=${DURATION:-10}
CLIENTS=${CLIENTS:-4}
OUTSTANDING=${OUTSTANDING:-100}
[ -n "${BEFORE_BINARY:-}" ] || die "BEFORE_BINARY (the baseline binary) is required"
[ -x "$BEFORE_BINARY" ] || die "$BEFORE_BINARY is not an executable"
cp "$BEFORE_BINARY" "$WORK/coredns-before"
need dnsperf dig curl ss

"$GO" run "$BENCH/zonegen" -n "$RECORDS" -zone "$WORK/zone" -queries "$WORK/queries" -nqueries "$QUERIES" -missing 0
# The miss-heavy file: MISS_LINES lines (MISSING of them for missing names),
# repeated many times in a run as dnsperf wraps around it.
"$GO" run "$BENCH/zonegen" -n "$RECORDS" -zone "$WORK/zone" -queries "$WORK/queries.missing" -nqueries "$MISS_LINES" -missing "$MISSING"
nx_lines=$(grep -c '^nx-' "$WORK/queries.missing")
nx_want=$(calc %.4f "$nx_lines / $MISS_LINES")

# setup LABEL BINARY: start the members and both routers with BINARY; sets
# r1_dns r1_api r1_metrics r2_dns r2_api and SET_PIDS.
setup() {
	local label=$1 bin=$2
	shard_members "$label" "$bin"
	r1_dns=$(free_port) r1_api=$(free_port) r1_metrics=$(free_port)
	r2_dns=$(free_port) r2_api=$(free_port)
	for r in 1 2; do
		eval "local dns=\$r${r}_dns api=\$r${r}_api"
		cat >"$WORK/$label-router$r.Corefile" <<EOF
.:$dns {
    bind 127.0.0.1
    craftroute {
$(shard_lines)
$(router_key "$bin")
        key name
        api 127.0.0.1:$api
    }
$(if [ "$r" = 1 ]; then echo "    prometheus 127.0.0.1:$r1_metrics"; fi)
}
EOF
		COREDNS=$bin start "$label-router$r" ""
		SET_PIDS+=("$LAST_PID")
	done
	local router1_pid=${SET_PIDS[6]}
	wait_http "$router1_pid" "$label-router1" "http://127.0.0.1:$r1_metrics/metrics"
	put_zone "$label" "$r1_api"
	wait_dns "$router1_pid" "$label-router1" "$r1_dns" host-1.example.org A
	wait_dns "${SET_PIDS[7]}" "$label-router2" "$r2_dns" host-1.example.org A
}

metric() {
	curl -fsS "http://127.0.0.1:$r1_metrics/metrics" | awk -v m="$1" '$1 == m || index($1, m "{") == 1 { s += $NF } END { printf "%d\n", s }'
}

# perf LABEL FILE: one dnsperf run through router 1; prints "qps latency_ms
# completed noerror nxdomain".
perf() {
	local out="$WORK/$1.dnsperf"
	dnsperf -s 127.0.0.1 -p "$r1_dns" -d "$2" -l "$DURATION" -n 50 -c "$CLIENTS" -q "$OUTSTANDING" -t 2 >"$out" 2>&1 ||
		{ cat "$out" >&2; die "dnsperf $1 failed"; }
	local done
	done=$(dnsperf_field "$out" completed)
	[ "$(calc %d "$(dnsperf_field "$out" lost) > 0.01 * $done")" = 0 ] || die "$1: over 1% of the queries lost"
	echo "$(dnsperf_field "$out" qps) $(calc %.3f "$(dnsperf_field "$out" latency) * 1000") $done $(rcode_count "$out" NOERROR) $(rcode_count "$out" NXDOMAIN)"
}

# writer N: N names written through router 2, 20 a second.
writer() {
	local i
	for i in $(seq "$1"); do
		curl -fsS -o /dev/null --max-time 5 -H "Content-Type: application/json" -X POST "http://127.0.0.1:$r2_api/v1/zones/example.org/records" \
			-d "{\"add\": [\"bench-w$i.example.org. 60 IN A 192.0.2.1\"]}" || true
		sleep 0.05
	done
}

for label in before after; do
	bin=$WORK/coredns-$label
	[ "$label" = after ] && bin=$COREDNS
	echo "# $label: $("$bin" -version | head -n 1)" >&2
	setup "$label" "$bin"
	res=$(perf "$label-existing" "$WORK/queries")
	set -- $res
	eval "${label}_qps=$1 ${label}_lat=$2"
	# Write latency: 200 changes one after the other through router 1 (with
	# leases, each waits for its notices to both routers).
	t0=$(date +%s%N)
	for i in $(seq 200); do
		curl -fsS -o /dev/null --max-time 5 -H "Content-Type: application/json" -X POST "http://127.0.0.1:$r1_api/v1/zones/example.org/records" \
			-d "{\"add\": [\"lat-w$i.example.org. 60 IN A 192.0.2.3\"]}" || die "$label: write $i failed"
	done
	eval "${label}_wlat=$(calc %.2f "($(date +%s%N) - $t0) / 200 / 1e6")"
	h0=$(metric coredns_craftroute_negative_cache_hits_total)
	res=$(perf "$label-missing" "$WORK/queries.missing")
	set -- $res
	h1=$(metric coredns_craftroute_negative_cache_hits_total)
	eval "${label}_hits=$(calc %.3f "($h1 - $h0) / ($3 * $nx_want)")"
	writer $((DURATION * 20)) &
	wpid=$!
	h0=$(metric coredns_craftroute_negative_cache_hits_total)
	res=$(perf "$label-missing-writes" "$WORK/queries.missing")
	set -- $res
	h1=$(metric coredns_craftroute_negative_cache_hits_total)
	wait "$wpid"
	eval "${label}_whits=$(calc %.3f "($h1 - $h0) / ($3 * $nx_want)")"
	if [ "$label" = after ]; then
		stale=0
		for i in $(seq 100); do
			curl -fsS -o /dev/null --max-time 5 -H "Content-Type: application/json" -X POST "http://127.0.0.1:$r2_api/v1/zones/example.org/records" \
				-d "{\"add\": [\"check-$i.example.org. 60 IN A 192.0.2.2\"]}" || die "write through router 2 failed"
			dig +time=2 +tries=1 +norec -p "$r1_dns" @127.0.0.1 "check-$i.example.org" A | grep -q 'status: NOERROR' ||
				stale=$((stale + 1))
		done
	fi
	teardown
done

echo
echo "two shards of three members, two routers (key mode name), $RECORDS records, dnsperf -c $CLIENTS -q $OUTSTANDING, ${DURATION}s runs"
printf '%-8s %12s %14s %22s %26s\n' binary 'qps existing' 'latency ms' "cache hits ($MISSING missing)" 'hits, writes via router 2'
for label in before after; do
	eval "printf '%-8s %12.0f %14s %22s %26s\n' $label \$${label}_qps \$${label}_lat \$${label}_hits \$${label}_whits"
done
printf 'after/before: qps x%s, latency x%s\n' "$(calc %.2f "$after_qps / $before_qps")" "$(calc %.2f "$after_lat / $before_lat")"
printf 'a write through router 1, one at a time: %s ms before, %s ms after (x%s)\n' "$before_wlat" "$after_wlat" "$(calc %.2f "$after_wlat / $before_wlat")"
printf 'names written through router 2 and asked through router 1 at once: %d of 100 missing\n' "$stale"
[ "$stale" -eq 0 ] || die "router 1 missed names written through router 2"
