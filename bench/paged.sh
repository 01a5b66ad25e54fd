#!/usr/bin/env bash
# paged.sh: one craftstore member's zone of RECORDS records (mostly A)
# served in memory mode and in paged mode (memory paged CACHE: the records
# read from the bbolt file at each query), side by side in one run (issue
# 54): anonymous and file-backed RSS after a start, time from the start to
# the first answer, and CPU per query with a hot set (HOT names asked over
# and over) and with names drawn uniformly from the whole zone, as ratios
# paged/memory; CoreDNS's whoami beside (the server path's bound).
#
# The zone is PUT once into one member in paged mode (seeded when the
# zone file is over the API's 256 MiB), whose peak anonymous memory
# meanwhile is reported (RssAnon sampled every 0.2 s: an import holds a
# chunk of the zone, not the zone); the member is then stopped, its data
# directory is copied, and a memory member and a paged
# member start on the two copies, and a third memory member, "gc25", with
# `gc_headroom 25` (craftstore steers the collector to a heap 25% over the
# live one, where the others leave Go's GOGC=100: issue 54, item 5). They run on CPU $SERVER_CPU
# (one at a time under load), dnsperf on $LOAD_CPU. The kinds take turns,
# ROUNDS times; the table shows medians and the median of each round's
# ratio.
#
# Knobs (environment): RECORDS (1000000), CACHE (50000 names), HOT (1000
# names), QUERIES (200000 lines per file), DURATION (seconds per run, 10),
# ROUNDS (3), WARMUP (5), SETTLE (10 seconds before RSS is read), CLIENTS
# (4), OUTSTANDING (200), SERVER_CPU (0), LOAD_CPU (1), MODES (the members
# to run, "memory gc25 paged"; without memory no ratios are printed: for
# zones whose memory-mode members would not fit, MODES=paged gives paged
# mode's memory and start time), COREDNS_BINARY, KEEP=1.
#
# It fails when a member does not start, when an answer is not NOERROR, or
# when over 1% of the queries are lost.

. "$(dirname "$0")/lib.sh"

RECORDS=${RECORDS:-1000000}
CACHE=${CACHE:-50000}
HOT=${HOT:-1000}
QUERIES=${QUERIES:-200000}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
WARMUP=${WARMUP:-5}
SETTLE=${SETTLE:-10}
CLIENTS=${CLIENTS:-4}
OUTSTANDING=${OUTSTANDING:-200}

need dnsperf dig curl taskset ss

"$GO" run "$BENCH/zonegen" -n "$RECORDS" -mix hosts -zone "$WORK/zone"
last=$(tail -n 1 "$WORK/zone" | awk '{ print $1 }').example.org
echo "# zone file $(du -h "$WORK/zone" | cut -f1), last name $last; work dir $WORK" >&2
awk '$3 == "A" && $1 ~ /^host-/ { print $1 }' "$WORK/zone" >"$WORK/names"
shuf -n "$QUERIES" -r --random-source=<(yes) "$WORK/names" | awk '{ printf "%s.example.org A\n", $1 }' >"$WORK/uniform.queries"
shuf -n "$HOT" --random-source=<(yes 1) "$WORK/names" >"$WORK/hot.names"
shuf -n "$QUERIES" -r --random-source=<(yes 2) "$WORK/hot.names" | awk '{ printf "%s.example.org A\n", $1 }' >"$WORK/hot.queries"

# corefile NAME DNS API READY MODE [LINE]: a member's Corefile on
# $WORK/NAME, with LINE added to its craftstore block.
# (A zone file over the API's 256 MiB body, 10M records and more, is
# imported with the seed directive instead of PUT.)
corefile() {
	cat >"$WORK/$1.Corefile" <<EOC
example.org:$2 {
    bind 127.0.0.1
    craftstore {
        data $WORK/$1
        api 127.0.0.1:$3
        max_zone_records $((RECORDS + 1000))
        memory $5
${6:+        $6}
    }
    ready 127.0.0.1:$4
}
EOC
}

# peak_anon PID: samples PID's RssAnon every 0.2 s into $WORK/peak_anon
# (kB, the largest seen) until $WORK/peak_stop appears or PID ends.
peak_anon() {
	local max=0 v
	while [ ! -e "$WORK/peak_stop" ] && kill -0 "$1" 2>/dev/null; do
		v=$(status_kb "$1" RssAnon 2>/dev/null) || break
		[ "${v:-0}" -gt "$max" ] && max=$v && echo "$max" >"$WORK/peak_anon"
		sleep 0.2
	done
}

# The import, once, into a paged member: the file it writes is the same
# as a memory member's, and its memory is the import's alone.
imp_dns=$(free_port) imp_api=$(free_port) imp_ready=$(free_port)
if [ "$(stat -c %s "$WORK/zone")" -le $((256 << 20)) ]; then
	corefile import "$imp_dns" "$imp_api" "$imp_ready" "paged $CACHE"
	start import ""
	imp_pid=$LAST_PID
	wait_http "$imp_pid" import "http://127.0.0.1:$imp_ready/ready"
	peak_anon "$imp_pid" &
	sampler=$!
	t0=$(date +%s.%N)
	curl -fsS --max-time 1800 -X PUT -H 'Content-Type: text/dns' --data-binary @"$WORK/zone" \
		"http://127.0.0.1:$imp_api/v1/zones/example.org" >/dev/null || die "PUT of the zone failed"
	import_how="PUT of $RECORDS records: $(calc %.1f "$(date +%s.%N) - $t0")s"
else
	corefile import "$imp_dns" "$imp_api" "$imp_ready" "paged $CACHE" "seed example.org $WORK/zone"
	t0=$(date +%s.%N)
	start import ""
	imp_pid=$LAST_PID
	peak_anon "$imp_pid" &
	sampler=$!
	wait_dns "$imp_pid" import "$imp_dns" "$last" A 3600
	import_how="seed of $RECORDS records: $(calc %.1f "$(date +%s.%N) - $t0")s"
fi
touch "$WORK/peak_stop"
wait "$sampler" || true
peak_kb=$(cat "$WORK/peak_anon" 2>/dev/null || echo 0)
import_how="$import_how, peak anonymous memory $(calc %.0f "$peak_kb / 1024") MiB ($(calc %.0f "$peak_kb * 1024 / $RECORDS") B/record)"
echo "# $import_how" >&2
kill "$imp_pid"
for _ in $(seq 300); do kill -0 "$imp_pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$imp_pid" 2>/dev/null && die "the importing member did not stop"
read -r -a modes <<<"${MODES:-memory gc25 paged}"
for mode in "${modes[@]}"; do
	case $mode in memory | gc25 | paged) ;; *) die "MODES: unknown mode $mode" ;; esac
	cp -a "$WORK/import" "$WORK/$mode"
done
db=$(du -m "$WORK/import/craftstore.db" | cut -f1)

# The members, one after the other: start to the last name answered.
declare -A dnsport pidof startup anon_start
for mode in "${modes[@]}"; do
	dns=$(free_port) api=$(free_port) ready=$(free_port)
	case $mode in
	memory) corefile "$mode" "$dns" "$api" "$ready" memory ;;
	gc25) corefile "$mode" "$dns" "$api" "$ready" memory "gc_headroom 25" ;;
	paged) corefile "$mode" "$dns" "$api" "$ready" "paged $CACHE" ;;
	esac
	t0=$(date +%s.%N)
	start "$mode" "$SERVER_CPU"
	pidof[$mode]=$LAST_PID
	dnsport[$mode]=$dns
	wait_dns "$LAST_PID" "$mode" "$dns" "$last" A 600
	startup[$mode]=$(calc %.2f "$(date +%s.%N) - $t0")
	sleep "$SETTLE"
	anon_start[$mode]=$(status_kb "$LAST_PID" RssAnon)
	echo "# $mode: first answer after ${startup[$mode]}s, RssAnon $(calc %.0f "${anon_start[$mode]} / 1024") MiB ${SETTLE}s later" >&2
done
who_dns=$(free_port)
cat >"$WORK/whoami.Corefile" <<EOC
example.org:$who_dns {
    bind 127.0.0.1
    whoami
}
EOC
start whoami "$SERVER_CPU"
pidof[whoami]=$LAST_PID
dnsport[whoami]=$who_dns
wait_dns "$LAST_PID" whoami "$who_dns" example.org A

# run MODE KIND ROUND: one dnsperf run of KIND's queries at MODE's member;
# appends "qps us_per_query" to $WORK/MODE-KIND.results.
run() {
	local mode=$1 kind=$2 round=$3 out="$WORK/$1-$2.$3.dnsperf" pid=${pidof[$1]}
	alive "$pid" "$mode"
	local t0 t1
	t0=$(cpu_ticks "$pid")
	taskset -c "$LOAD_CPU" dnsperf -s 127.0.0.1 -p "${dnsport[$mode]}" -d "$WORK/$kind.queries" -l "$DURATION" \
		-c "$CLIENTS" -q "$OUTSTANDING" -t 2 >"$out" 2>&1 || { cat "$out" >&2; die "dnsperf ($mode $kind) failed"; }
	t1=$(cpu_ticks "$pid")
	local done lost qps noerror us
	done=$(dnsperf_field "$out" completed)
	lost=$(dnsperf_field "$out" lost)
	qps=$(dnsperf_field "$out" qps)
	noerror=$(rcode_count "$out" NOERROR)
	[ "${done:-0}" -gt 0 ] || { cat "$out" >&2; die "$mode $kind: no query completed"; }
	[ "$noerror" -eq "$done" ] || die "$mode $kind: unexpected rcodes: $(rcodes "$out")"
	[ "$(calc %d "$lost > 0.01 * ($done + $lost)")" = 0 ] || die "$mode $kind: $lost queries lost of $((done + lost))"
	us=$(calc %.2f "($t1 - $t0) / $TICK_HZ * 1e6 / $done")
	printf '# round %d %-7s %-8s %9.0f qps %7s us/query\n' "$round" "$mode" "$kind" "$qps" "$us" >&2
	echo "$qps $us" >>"$WORK/$mode-$kind.results"
}

if [ "$WARMUP" -gt 0 ]; then
	for mode in "${modes[@]}"; do
		for kind in hot uniform; do
			taskset -c "$LOAD_CPU" dnsperf -s 127.0.0.1 -p "${dnsport[$mode]}" -d "$WORK/$kind.queries" -l "$WARMUP" \
				-c "$CLIENTS" -q "$OUTSTANDING" -t 2 >"$WORK/warmup.dnsperf" 2>&1 ||
				{ cat "$WORK/warmup.dnsperf" >&2; die "dnsperf (warm-up) failed"; }
		done
	done
fi
for round in $(seq "$ROUNDS"); do
	for kind in hot uniform; do
		for mode in "${modes[@]}"; do run "$mode" "$kind" "$round"; done
	done
	run whoami hot "$round"
done
sleep "$SETTLE"

col() { awk -v c="$2" '{ print $c }' "$WORK/$1.results"; }
ratio() { # ratio A B COL: the median of each round's A / B ("-" without B)
	[ -e "$WORK/$2.results" ] || { echo -; return; }
	paste "$WORK/$1.results" "$WORK/$2.results" | awk -v c="$3" '{ printf "%.2f\n", $c / $(c + 2) }'
}
rmed() { local r; r=$(ratio "$@"); if [ "$r" = - ]; then echo -; else median $r; fi; }
mib() { calc %.0f "$(status_kb "$1" "$2") / 1024"; }

echo
echo "$RECORDS records (bbolt file $db MiB), cache $CACHE names, hot set $HOT names, $ROUNDS rounds of ${DURATION}s"
printf '%-16s %10s %10s %12s\n' '' qps us/query 'us/memory'
for kind in hot uniform; do
	for mode in "${modes[@]}"; do
		printf '%-16s %10.0f %10.2f %12s\n' "$mode $kind" "$(median $(col "$mode-$kind" 1))" "$(median $(col "$mode-$kind" 2))" \
			"$(rmed "$mode-$kind" "memory-$kind" 2)"
	done
done
printf '%-16s %10.0f %10.2f %12s\n' "whoami" "$(median $(col whoami-hot 1))" "$(median $(col whoami-hot 2))" \
	"$(rmed whoami-hot memory-hot 2)"
echo
printf '%-8s %12s %14s %14s %10s %10s %14s\n' mode 'first answer' 'anon at start' 'anon B/rec' 'RssAnon' 'RssFile' 'after the runs'
for mode in "${modes[@]}"; do
	pid=${pidof[$mode]}
	printf '%-8s %11ss %10.0f MiB %14.0f %6s MiB %6s MiB\n' "$mode" "${startup[$mode]}" "$(calc %f "${anon_start[$mode]} / 1024")" \
		"$(calc %f "${anon_start[$mode]} * 1024 / $RECORDS")" "$(mib "$pid" RssAnon)" "$(mib "$pid" RssFile)"
done
echo "import into a paged member: $import_how"
