#!/usr/bin/env bash
# writes.sh: write throughput of a three-member craftstore group, and reads
# on one member with and without that write load. See bench/README.md.
#
# It starts three members on loopback (fresh data directories, free ports,
# the zone of RECORDS records seeded), then:
#  1. writes: bench/writeload adds records through POST
#     /v1/zones/example.org/records on the leader's API (WRITE_TO=all: spread
#     over the three members) with CONC clients and BATCH records per
#     request, STEP seconds per combination: committed records/s (answers
#     200 only), p50/p99 latency;
#  2. reads under writes, for READ_ON (leader, follower): that member alone
#     on CPU $SERVER_CPU, everything else on CPU $LOAD_CPU (dnsperf at nice
#     -10 when run as root); dnsperf as fast
#     as it goes (qps) and at READ_RATE queries/s (latency), first idle
#     (once every member has applied the same index: the group at rest),
#     then while READ_CLIENTS clients add READ_BATCH records per request (at
#     WRITE_RATE records/s together, steady, when set);
#  3. checks that every member holds the same number of records, and that
#     it is the seeded zone plus at least every acknowledged record.
#
# Knobs (environment): RECORDS (10000), CONC (1,16,64), BATCH (1,10), STEP
# (5), WRITE_TO (leader), READ_ON (leader follower; empty: no reads), READ_DURATION (8),
# READ_RATE (5000), READ_CLIENTS (16), READ_BATCH (10), WRITE_RATE (0: as
# fast as the clients go), READ_RT (0; 1: dnsperf real-time at a fixed
# rate), RAFT_TLS (0; 1: the
# members' Raft transport is mutual TLS, raft_tls, with certificates made
# for the run), KEEP=1. bench/writes-tls.sh runs it without and with TLS.

. "$(dirname "$0")/lib.sh"

RECORDS=${RECORDS:-10000}
CONC=${CONC:-1,16,64}
BATCH=${BATCH:-1,10}
STEP=${STEP:-5}
WRITE_TO=${WRITE_TO:-leader}
READ_ON=${READ_ON-leader follower}
READ_DURATION=${READ_DURATION:-8}
READ_RATE=${READ_RATE:-5000}
READ_CLIENTS=${READ_CLIENTS:-16}
READ_BATCH=${READ_BATCH:-10}
WRITE_RATE=${WRITE_RATE:-0}
RAFT_TLS=${RAFT_TLS:-0}
READ_RT=${READ_RT:-0}

need dnsperf dig curl jq taskset ss

"$GO" run "$BENCH/zonegen" -n "$RECORDS" -zone "$WORK/zone" -queries "$WORK/queries" -nqueries 100000
"$GO" build -o "$WORK/writeload" "$BENCH/writeload"

declare -a dns api raft ready pid tls pprof metrics
for i in 1 2 3; do
	dns[i]=$(free_port) api[i]=$(free_port) raft[i]=$(free_port) ready[i]=$(free_port) pprof[i]=$(free_port) metrics[i]=$(free_port)
done
if [ "$RAFT_TLS" = 1 ]; then
	"$GO" run "$ROOT/internal/certs/gen" -dir "$WORK/certs" -members 3 -years 1
	for i in 1 2 3; do
		tls[i]="raft_tls $WORK/certs/member$i.pem $WORK/certs/member$i-key.pem $WORK/certs/ca.pem"
	done
fi
for i in 1 2 3; do
	cat >"$WORK/m$i.Corefile" <<EOF
example.org:${dns[i]} {
    bind 127.0.0.1
    craftstore {
        id $i
        data $WORK/m$i
        peer 1 127.0.0.1:${raft[1]}
        peer 2 127.0.0.1:${raft[2]}
        peer 3 127.0.0.1:${raft[3]}
        ${tls[i]:-}
        seed example.org $WORK/zone
        api 127.0.0.1:${api[i]}
    }
    ready 127.0.0.1:${ready[i]}
    ${PPROF:+pprof 127.0.0.1:${pprof[i]}}
    ${PPROF:+prometheus 127.0.0.1:${metrics[i]}}
}
EOF
	start "m$i" ""
	pid[i]=$LAST_PID
done
for i in 1 2 3; do
	wait_http "${pid[i]}" "m$i" "http://127.0.0.1:${ready[i]}/ready"
	wait_dns "${pid[i]}" "m$i" "${dns[i]}" host-1.example.org A
done

# applied I prints the Raft index member I has applied.
applied() { curl -fsS --max-time 5 "http://127.0.0.1:${api[$1]}/v1/cluster" | jq -r .applied; }

# settle waits (up to 60 s) until every member has applied the same index
# and it stays there for a second: the idle runs measure a group at rest,
# not the leader feeding followers that are still catching up on the
# writes step.
settle() {
	local end=$((SECONDS + 60)) a prev=
	while [ $SECONDS -lt $end ]; do
		a="$(applied 1) $(applied 2) $(applied 3)"
		if [ "$a" = "$prev" ] && [ "$(echo "$a" | tr ' ' '\n' | sort -u | wc -l)" = 1 ]; then
			return
		fi
		prev=$a
		sleep 1
	done
	echo "# the group did not settle in 60 s (applied: $a)" >&2
}

# leader prints the member id of the leader as member 1 sees it.
leader() { curl -fsS --max-time 5 "http://127.0.0.1:${api[1]}/v1/cluster" | jq -r .leader; }
# records I prints the number of records in example.org on member I.
records() {
	curl -fsS --max-time 30 "http://127.0.0.1:${api[$1]}/v1/zones" |
		jq -r '.[] | select(.zone == "example.org.") | .records'
}
L=$(leader)
[ "$L" -ge 1 ] 2>/dev/null || die "no leader"
F=$((L % 3 + 1)) # a follower
initial=$(records "$L")
echo "# three members up (Raft transport: $([ "$RAFT_TLS" = 1 ] && echo mutual TLS || echo plain TCP)), leader m$L, example.org holds $initial records; work dir $WORK" >&2

targets="http://127.0.0.1:${api[L]}"
if [ "$WRITE_TO" = all ]; then
	targets="http://127.0.0.1:${api[1]},http://127.0.0.1:${api[2]},http://127.0.0.1:${api[3]}"
fi

# committed FILE adds up the records acknowledged in a writeload output;
# sent FILE the records of every request sent.
committed() { awk '$1 ~ /^[0-9]+$/ { n += $2 * $4 } END { print n + 0 }' "$1"; }
sent() { awk '$1 ~ /^[0-9]+$/ { n += $2 * $3 } END { print n + 0 }' "$1"; }

echo
echo "writes: POST /v1/zones/example.org/records to $WRITE_TO ($targets), ${STEP}s per step, unpinned"
"$WORK/writeload" -api "$targets" -c "$CONC" -batch "$BATCH" -d "${STEP}s" -prefix w | tee "$WORK/writes.out" |
	awk '{ printf "%-8s %-6s %-9s %-8s %-10s %-8s %-8s %-8s", $1, $2, $3, $4, $5, $6, $7, $8; $1 = $2 = $3 = $4 = $5 = $6 = $7 = $8 = ""; sub(/^ +/, ""); print "", $0 }'

# pin READER: the member READER alone on SERVER_CPU, the others on LOAD_CPU
# (all threads: taskset -a).
pin() {
	local i
	for i in 1 2 3; do
		if [ "$i" = "$1" ]; then
			taskset -a -p -c "$SERVER_CPU" "${pid[i]}" >/dev/null
		else
			taskset -a -p -c "$LOAD_CPU" "${pid[i]}" >/dev/null
		fi
	done
	sleep 2 # the Go runtime adapts GOMAXPROCS to the new affinity within a second
}

# dnsperf shares its CPU with two members and writeload: it runs at a higher
# priority (when allowed) so that the member under test, not dnsperf, limits.
BOOST=
if [ "$(id -u)" = 0 ]; then BOOST="nice -n -10"; fi

# durations I prints member I's request duration histogram: "le count"
# lines, the buckets of every label set added up.
durations() {
	curl -fsS --max-time 5 "http://127.0.0.1:${metrics[$1]}/metrics" |
		awk '/^coredns_dns_request_duration_seconds_bucket/ && match($0, /le="[^"]*"/) { c[substr($0, RSTART + 4, RLENGTH - 5)] += $NF }
			END { for (le in c) print le, c[le] }'
}

# hist_p99 BEFORE AFTER: the bucket bound (ms) under which 99% of the
# requests between the two histograms fall.
hist_p99() {
	awk 'NR == FNR { a[$1] = $2; next } { print $1, $2 - a[$1] }' "$1" "$2" | sort -g |
		awk '{ le[NR] = $1; n[NR] = $2 } END { t = n[NR]; for (k = 1; k <= NR; k++) if (n[k] >= 0.99 * t) { printf "%s", (le[k] == "+Inf" ? "inf" : le[k] * 1000); exit } }'
}

# reads NAME I MODE: dnsperf against member I, MODE max (as fast as it
# goes) or rate (READ_RATE queries/s, each query's latency kept: -v);
# prints "qps avg_ms p99_ms max_ms cpu% lost" (p99 "-" at max).
reads() {
	local name=$1 i=$2 mode=$3 out="$WORK/read.$1.dnsperf" t0 t1 extra=()
	[ "$mode" = rate ] && extra=(-Q "$READ_RATE" -v)
	t0=$(cpu_ticks "${pid[i]}")
	[ -n "${PPROF:-}" ] && durations "$i" >"$out.h0"
	local boost=$BOOST
	# READ_RT=1: at a fixed rate dnsperf, which waits most of the time, runs
	# real-time (SCHED_FIFO, as root) so that its own waits for the busy CPU
	# do not count as the member's latency; at max it would starve that CPU.
	# Not by default: on some machines dnsperf under SCHED_FIFO spins on
	# its one CPU and does not end (an 8 s run was still spinning after 10
	# minutes). Either way a run that outlasts its duration by 30 s fails.
	if [ "$mode" = rate ] && [ "$(id -u)" = 0 ] && [ "$READ_RT" = 1 ]; then boost="chrt -f 10"; fi
	$boost timeout -s KILL $((READ_DURATION + 30)) taskset -c "$LOAD_CPU" dnsperf -s 127.0.0.1 -p "${dns[i]}" -d "$WORK/queries" -l "$READ_DURATION" -n 50 \
		-c 4 -q 200 -t 2 "${extra[@]}" >"$out.all" 2>&1 || { cat "$out.all" >&2; die "dnsperf failed or did not end (READ_RT=$READ_RT)"; }
	t1=$(cpu_ticks "${pid[i]}")
	if [ -n "${PPROF:-}" ] && [ "$mode" = rate ]; then
		durations "$i" >"$out.h1"
		echo "m$i $name: the server's own p99 (coredns_dns_request_duration_seconds, bucket bound): $(hist_p99 "$out.h0" "$out.h1") ms" >&2
	fi
	# -v prints "> RCODE NAME TYPE SECONDS" per answer.
	grep -v '^> ' "$out.all" >"$out" || true
	local p99=-
	if [ "$mode" = rate ]; then
		p99=$(awk '/^> / { print $NF }' "$out.all" | sort -g |
			awk '{ l[NR] = $1 } END { if (NR == 0) { print "-"; exit } i = int(NR * 0.99); if (i < NR * 0.99) i++; printf "%.3f", l[i] * 1000 }')
	fi
	rm -f "$out.all"
	local done noerror nxdomain
	done=$(dnsperf_field "$out" completed)
	noerror=$(rcode_count "$out" NOERROR)
	nxdomain=$(rcode_count "$out" NXDOMAIN)
	[ $((noerror + nxdomain)) -eq "$done" ] || die "m$i: unexpected rcodes: $(rcodes "$out")"
	printf '%.0f %.3f %s %.3f %.0f %s' "$(dnsperf_field "$out" qps)" \
		"$(calc %.3f "$(dnsperf_field "$out" latency) * 1000")" "$p99" \
		"$(calc %.3f "$(dnsperf_field "$out" latmax) * 1000")" \
		"$(calc %.0f "($t1 - $t0) / $TICK_HZ / $READ_DURATION * 100")" \
		"$(dnsperf_field "$out" lost)"
}

if [ -n "$READ_ON" ]; then
	echo
	echo "reads on one member (alone on CPU $SERVER_CPU; other members, writeload, dnsperf on CPU $LOAD_CPU), ${READ_DURATION}s runs"
	echo "write load: $READ_CLIENTS clients x $READ_BATCH records/request to the leader$([ "$WRITE_RATE" != 0 ] && echo ", $WRITE_RATE records/s in all")"
	printf '%-9s %-6s %-5s %9s %8s %8s %8s %6s %5s   %s\n' member load mode qps avg_ms p99_ms max_ms 'cpu%' lost 'writes during the run'
fi
for who in $READ_ON; do
	case $who in leader) R=$L ;; follower) R=$F ;; *) die "READ_ON: $who is not leader or follower" ;; esac
	pin "$R"
	settle
	for mode in max rate; do
		printf '%-9s %-6s %-5s %s\n' "m$R/$who" idle "$mode" "$(reads "$who-idle-$mode" "$R" "$mode" |
			awk '{ printf "%9s %8s %8s %8s %6s %5s", $1, $2, $3, $4, $5, $6 }')"
	done
	taskset -c "$LOAD_CPU" "$WORK/writeload" -api "http://127.0.0.1:${api[L]}" -c "$READ_CLIENTS" -batch "$READ_BATCH" \
		-rate "$WRITE_RATE" -d "$((2 * READ_DURATION + 3))s" -header=false -prefix "r$who" >"$WORK/bg.$who.out" &
	wl=$!
	sleep 1
	if [ -n "${PPROF:-}" ]; then
		# PPROF=1: an execution trace of the reader during the writes, kept in the work directory.
		(sleep $((READ_DURATION + 2)) && curl -fsS -o "$WORK/trace.$who.out" "http://127.0.0.1:${pprof[R]}/debug/pprof/trace?seconds=3") &
	fi
	for mode in max rate; do
		printf '%-9s %-6s %-5s %s\n' "m$R/$who" writes "$mode" "$(reads "$who-writes-$mode" "$R" "$mode" |
			awk '{ printf "%9s %8s %8s %8s %6s %5s", $1, $2, $3, $4, $5, $6 }')"
	done
	wait "$wl" || die "writeload failed"
	awk '{ printf "%-9s %s records/s committed, p50 %s ms, p99 %s ms, errors %s\n", "", $5, $6, $7, $9 }' "$WORK/bg.$who.out"
	cat "$WORK/bg.$who.out" >>"$WORK/writes.out"
	taskset -a -p -c "$SERVER_CPU,$LOAD_CPU" "${pid[R]}" >/dev/null
done
for i in 1 2 3; do taskset -a -p -c "$SERVER_CPU,$LOAD_CPU" "${pid[i]}" >/dev/null; done

# Every member converges on the same zone, holding every acknowledged record.
acked=$(committed "$WORK/writes.out")
maxrec=$(sent "$WORK/writes.out")
end=$((SECONDS + 60))
while :; do
	r1=$(records 1) r2=$(records 2) r3=$(records 3)
	[ "$r1" = "$r2" ] && [ "$r2" = "$r3" ] && break
	[ $SECONDS -lt $end ] || die "members disagree after 60s: $r1 $r2 $r3 records"
	sleep 1
done
echo
echo "records: seeded $initial, acknowledged +$acked, sent +$maxrec; every member holds $r1"
[ "$r1" -ge $((initial + acked)) ] || die "acknowledged records are missing: $r1 < $initial + $acked"
[ "$r1" -le $((initial + maxrec)) ] || die "more records than were sent: $r1 > $initial + $maxrec"
