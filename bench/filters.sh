#!/usr/bin/env bash
# filters.sh: what a flood of made-up names costs a router in key mode name
# with the shards' existence filters and without (craftroute's README,
# "Existence filters"; issue 54, item 3). Two shards of one craftstore
# member each hold a generated zone split by name; two routers front them,
# one with name_filters (the default) and one with `name_filters 0`, both
# with `negative_cache 0` (the made-up names are drawn anew for every query
# and never repeat, so a cache would not help: this isolates the filters).
# The routers run on CPU $SERVER_CPU, the members and dnsperf on $LOAD_CPU.
# Each round runs, one after the other: the query mix with MISSING made-up
# names (default 0.5) through each router, and names that exist only
# through the router with filters (what a hit costs). It reports each run's
# router CPU per query, the share of queries broadcast to every shard, and
# the ratios: mixed with filters / without, and mixed with filters / hits.
#
# Knobs (environment): RECORDS (100000), QUERIES (400000 lines), MISSING
# (0.5), DURATION (seconds per run, 10), ROUNDS (3), CLIENTS (dnsperf -c,
# 4), OUTSTANDING (dnsperf -q, 100), SERVER_CPU (0), LOAD_CPU (1),
# COREDNS_BINARY, KEEP=1.
#
# It fails when a server does not start, when an answer has an unexpected
# rcode or the NXDOMAIN share is not MISSING's, when over 1% of the queries
# are lost, or when the router with filters does not use them.

. "$(dirname "$0")/lib.sh"

RECORDS=${RECORDS:-100000}
QUERIES=${QUERIES:-400000}
MISSING=${MISSING:-0.5}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-4}
OUTSTANDING=${OUTSTANDING:-100}

need dnsperf dig curl taskset ss
"$COREDNS" -plugins | grep -q craftroute || die "$BINARY has no craftroute plugin"

echo "# zone of $RECORDS records; $QUERIES queries with $MISSING and with none for missing names; work dir $WORK" >&2
"$GO" run "$BENCH/zonegen" -n "$RECORDS" -zone "$WORK/zone" -queries "$WORK/queries.mixed" \
	-nqueries "$QUERIES" -missing "$MISSING"
"$GO" run "$BENCH/zonegen" -n "$RECORDS" -zone "$WORK/zone" -queries "$WORK/queries.hits" \
	-nqueries "$QUERIES" -missing 0
# A name a wildcard answers does not exist: every shard is asked for the
# closest encloser, filters or not. The hits are names that exist.
grep -v '\.wild\.' "$WORK/queries.hits" >"$WORK/queries.exist"
nx_want=$(calc %.4f "$(grep -c '^nx-' "$WORK/queries.mixed") / $QUERIES")

# member NAME: a lone craftstore member on CPU $LOAD_CPU; sets NAME_dns,
# NAME_api, NAME_pid.
member() {
	local name=$1 dns api ready
	dns=$(free_port) api=$(free_port) ready=$(free_port)
	cat >"$WORK/$name.Corefile" <<EOC
example.org:$dns {
    bind 127.0.0.1
    craftstore {
        cluster $name
        data $WORK/$name
        api 127.0.0.1:$api
$(router_key "$COREDNS")
    }
    ready 127.0.0.1:$ready
}
EOC
	start "$name" "$LOAD_CPU"
	wait_http "$LAST_PID" "$name" "http://127.0.0.1:$ready/ready"
	eval "${name}_dns=$dns ${name}_api=$api ${name}_pid=$LAST_PID"
}
member sha
member shb

# router NAME FILTERS: a craftroute over both shards on CPU $SERVER_CPU,
# with name_filters FILTERS; sets NAME_dns, NAME_api, NAME_metrics,
# NAME_pid.
router() {
	local name=$1 dns api metrics
	dns=$(free_port) api=$(free_port) metrics=$(free_port)
	cat >"$WORK/$name.Corefile" <<EOC
example.org:$dns {
    bind 127.0.0.1
    craftroute {
        shard a 127.0.0.1:$sha_dns
        shard b 127.0.0.1:$shb_dns
        shard_api a http://127.0.0.1:$sha_api
        shard_api b http://127.0.0.1:$shb_api
$(router_key "$COREDNS")
        key name
        negative_cache 0
        name_filters $2
        api 127.0.0.1:$api
    }
    prometheus 127.0.0.1:$metrics
}
EOC
	start "$name" "$SERVER_CPU"
	wait_http "$LAST_PID" "$name" "http://127.0.0.1:$metrics/metrics"
	eval "${name}_dns=$dns ${name}_api=$api ${name}_metrics=$metrics ${name}_pid=$LAST_PID"
}
router filters 64
router nofilters 0
put_zone filters "$filters_api"
wait_dns "$filters_pid" filters "$filters_dns" host-1.example.org A
wait_dns "$nofilters_pid" nofilters "$nofilters_dns" host-1.example.org A

# metric ROUTER NAME: the sum of a craftroute metric's series.
metric() {
	eval "local port=\$${1}_metrics"
	curl -fsS "http://127.0.0.1:$port/metrics" | awk -v m="$2" '$1 == m || index($1, m "{") == 1 { s += $NF } END { printf "%d\n", s }'
}

# The same answers through both routers (a sample of the mixed queries).
sample() {
	head -n 300 "$WORK/queries.mixed" | dig -p "$1" @127.0.0.1 +norec +noall +answer +comments +time=2 -f - 2>&1 |
		awk '/status:/ { sub(/,.*/, "", $6); print $6; next } /^[^;]/ && NF { print $1, $2, $4, $5 }'
}
sample "$nofilters_dns" >"$WORK/sample.nofilters"

# The filters are fetched at the first broadcast and used once they settle.
end=$((SECONDS + 60))
until [ "$(metric filters coredns_craftroute_filter_skips_total)" -gt 0 ]; do
	[ $SECONDS -lt $end ] || die "the router with filters did not use them within 60s: $(tail -n 5 "$WORK/filters.log")"
	dig +time=1 +tries=1 -p "$filters_dns" @127.0.0.1 "warm-$RANDOM$RANDOM.example.org" A >/dev/null 2>&1 || true
	sleep 0.5
done
echo "# filters in use: $(metric filters coredns_craftroute_filter_bytes) bytes" >&2
diff "$WORK/sample.nofilters" <(sample "$filters_dns") >"$WORK/sample.diff" ||
	{ head -n 20 "$WORK/sample.diff" >&2; die "the routers answer differently (diff above)"; }

# run LABEL ROUTER QFILE NXSHARE ROUND: one dnsperf run; appends
# "qps us_per_query broadcast_share" to $WORK/LABEL.results.
run() {
	local label=$1 r=$2 qfile=$3 want=$4 round=$5 b0 b1
	eval "local port=\$${r}_dns pid=\$${r}_pid"
	b0=$(metric "$r" coredns_craftroute_broadcasts_total)
	dnsperf_run "$label" "$port" "$pid" "$qfile" "$WORK/$label.$round.dnsperf"
	b1=$(metric "$r" coredns_craftroute_broadcasts_total)
	if [ "$(calc %d "($DP_NX - $want) > 0.01 || ($want - $DP_NX) > 0.01")" = 1 ]; then
		die "$label: NXDOMAIN share $DP_NX, expected $want"
	fi
	local share
	share=$(calc %.4f "($b1 - $b0) / $DP_DONE")
	printf '# round %d %-18s %9.0f qps %7s us/query, %s of the queries broadcast\n' "$round" "$label" "$DP_QPS" "$DP_US" "$share" >&2
	echo "$DP_QPS $DP_US $share" >>"$WORK/$label.results"
}

for round in $(seq "$ROUNDS"); do
	run mixed-filters filters "$WORK/queries.mixed" "$nx_want" "$round"
	run mixed-nofilters nofilters "$WORK/queries.mixed" "$nx_want" "$round"
	run hits filters "$WORK/queries.exist" 0 "$round"
done

col() { median $(awk -v c="$2" '{ print $c }' "$WORK/$1.results"); }
echo
echo "router over 2 shards, $RECORDS records, $MISSING made-up names, negative_cache 0, ${DURATION}s x $ROUNDS rounds, medians;"
echo "router on CPU $SERVER_CPU, members and dnsperf -c $CLIENTS -q $OUTSTANDING on CPU $LOAD_CPU"
printf '%-28s %10s %14s %12s\n' run qps 'us CPU/query' broadcast
for s in mixed-filters mixed-nofilters hits; do
	printf '%-28s %10.0f %14.2f %12s\n' "$s" "$(col "$s" 1)" "$(col "$s" 2)" "$(col "$s" 3)"
done
ratio() { median $(paste -d ' ' "$WORK/$1.results" "$WORK/$2.results" | awk '{ printf "%.3f\n", $2 / $5 }'); }
printf 'CPU per query, per-round ratios, median: with filters / without %s; with filters / hits %s\n' \
	"$(ratio mixed-filters mixed-nofilters)" "$(ratio mixed-filters hits)"
