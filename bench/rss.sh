#!/usr/bin/env bash
# rss.sh: memory of one craftstore member holding a zone of RECORDS records
# (mostly A) loaded through PUT /v1/zones/example.org, side by side with
# CoreDNS's file plugin serving the same zone file from the same binary.
# See bench/README.md.
#
# For craftstore it reports how long the PUT took, the RSS right after it,
# after SETTLE seconds (the Go runtime returns freed pages gradually), and
# after a restart of the member, which builds its view from the bbolt file
# alone: the steady state. For file, the time until the last name answers
# and the RSS after SETTLE seconds. RSS is VmRSS of /proc/PID/status, split
# into RssAnon (heap) and RssFile (mapped files: bbolt's mmap, the binary);
# bytes per record divide by RECORDS.
#
# The restart is done twice, with gc_headroom off (the default: Go's
# collector as it is, GOGC=100) and with gc_headroom GC_HEADROOM (25:
# craftstore steers GOGC from the live heap; craftstore's README), each measured after SETTLE seconds
# and again after DURATION seconds of dnsperf queries for names of the zone
# (the steady state under load), with the member's CPU per query meanwhile:
# the member runs on CPU $SERVER_CPU, dnsperf on $LOAD_CPU.
#
# BASE_BINARY (another build, e.g. an earlier commit's ./coredns): then
# this build's member and one of BASE_BINARY, both with gc_headroom off, on
# copies of the same bbolt file, run side by side: their memory after
# SETTLE seconds, ROUNDS (3) rounds of DURATION seconds of dnsperf taking
# turns between them on the same CPU, and the ratios this build/base of
# anonymous memory and of CPU per query (each round's, and the median).
#
# Knobs (environment): RECORDS (1000000), SETTLE (30), PUT_TIMEOUT (1800
# seconds), DURATION (10), CLIENTS (4), OUTSTANDING (100), GC_HEADROOM (the
# second restart's gc_headroom, 25), BASE_BINARY, ROUNDS (3), PPROF=1 (save
# heap profiles in the work dir; with KEEP=1).

. "$(dirname "$0")/lib.sh"

RECORDS=${RECORDS:-1000000}
SETTLE=${SETTLE:-30}
PUT_TIMEOUT=${PUT_TIMEOUT:-1800}
PPROF=${PPROF:-0}
DURATION=${DURATION:-10}
CLIENTS=${CLIENTS:-4}
OUTSTANDING=${OUTSTANDING:-100}
ROUNDS=${ROUNDS:-3}
if [ -n "${BASE_BINARY:-}" ]; then
	[ -x "$BASE_BINARY" ] || die "BASE_BINARY $BASE_BINARY is not an executable"
	cp "$BASE_BINARY" "$WORK/coredns.base"
fi

need dig curl ss dnsperf taskset

"$GO" run "$BENCH/zonegen" -n "$RECORDS" -mix hosts -zone "$WORK/zone" -queries "$WORK/queries" -nqueries 200000 -missing 0
last=$(tail -n 1 "$WORK/zone" | awk '{ print $1 }').example.org
echo "# zone file $(du -h "$WORK/zone" | cut -f1), last name $last; work dir $WORK" >&2

pprof_line() { [ "$PPROF" = 1 ] && echo "    pprof 127.0.0.1:$1" || true; }
heap() { [ "$PPROF" = 1 ] && curl -fsS --max-time 60 -o "$WORK/$2.heap" "http://127.0.0.1:$1/debug/pprof/heap" || true; }

# mem PID prints "VmRSS RssAnon RssFile VmHWM" in MiB.
mem() {
	printf '%.0f %.0f %.0f %.0f' "$(calc %f "$(status_kb "$1" VmRSS) / 1024")" \
		"$(calc %f "$(status_kb "$1" RssAnon) / 1024")" "$(calc %f "$(status_kb "$1" RssFile) / 1024")" \
		"$(calc %f "$(status_kb "$1" VmHWM) / 1024")"
}
rows=()
row() { # NAME PID
	local m
	m=$(mem "$2")
	echo "# $1: VmRSS RssAnon RssFile VmHWM (MiB) $m" >&2
	set -- "$1" $m
	rows+=("$(printf '%-36s %8s %8s %8s %8s %10.0f %10.0f' "$@" \
		"$(calc %f "$2 * 1048576 / $RECORDS")" "$(calc %f "$3 * 1048576 / $RECORDS")")")
}

# craftstore: one member, the zone PUT through the API.
cs_dns=$(free_port) cs_api=$(free_port) cs_ready=$(free_port) cs_pprof=$(free_port)
# member_corefile NAME DNS API READY PPROF [HEADROOM]: the Corefile of
# member NAME (data in $WORK/NAME), with gc_headroom HEADROOM.
member_corefile() {
	cat >"$WORK/$1.Corefile" <<EOF
example.org:$2 {
    bind 127.0.0.1
    craftstore {
        data $WORK/$1
        api 127.0.0.1:$3
        max_zone_records $((RECORDS + 1000))
${6:+        gc_headroom $6}
    }
    ready 127.0.0.1:$4
$(pprof_line "$5")
}
EOF
}
# cs_corefile [HEADROOM]: the member's Corefile, with gc_headroom HEADROOM.
cs_corefile() { member_corefile craftstore "$cs_dns" "$cs_api" "$cs_ready" "$cs_pprof" "${1:-}"; }
# stop_member PID: stop it and wait until it is gone.
stop_member() {
	kill "$1"
	for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
	die "member $1 did not stop"
}
cs_corefile
start craftstore "$SERVER_CPU"
cs_pid=$LAST_PID
wait_http "$cs_pid" craftstore "http://127.0.0.1:$cs_ready/ready"
row "craftstore empty" "$cs_pid"

echo "# PUT /v1/zones/example.org ($RECORDS records) ..." >&2
t0=$(date +%s.%N)
code=$(curl -sS --max-time "$PUT_TIMEOUT" -X PUT -H 'Content-Type: text/dns' --data-binary @"$WORK/zone" -o "$WORK/put.out" \
	-w '%{http_code}' "http://127.0.0.1:$cs_api/v1/zones/example.org") || code="curl failed ($?)"
put_s=$(calc %.1f "$(date +%s.%N) - $t0")
if [ "$code" != 200 ]; then
	echo "--- answer: $(head -c 1000 "$WORK/put.out" 2>/dev/null)" >&2
	echo "--- log" >&2
	tail -n 30 "$WORK/craftstore.log" >&2
	die "PUT failed after ${put_s}s: HTTP $code"
fi
echo "# PUT: $(cat "$WORK/put.out") in ${put_s}s" >&2
wait_dns "$cs_pid" craftstore "$cs_dns" "$last" A 60
row "craftstore after PUT" "$cs_pid"
sleep "$SETTLE"
row "craftstore +${SETTLE}s" "$cs_pid"
heap "$cs_pprof" craftstore
db=$(du -m "$WORK/craftstore/craftstore.db" | cut -f1)

# The same member restarted: the view built from bbolt alone, with Go's
# collector as it is and with craftstore steering it.
cpu=()
for headroom in off "${GC_HEADROOM:-25}"; do
	stop_member "$cs_pid"
	cs_corefile "$headroom"
	t0=$(date +%s.%N)
	start craftstore "$SERVER_CPU"
	cs_pid=$LAST_PID
	wait_dns "$cs_pid" craftstore "$cs_dns" "$last" A 600
	restart_s=$(calc %.1f "$(date +%s.%N) - $t0")
	sleep "$SETTLE"
	row "restarted, gc_headroom $headroom +${SETTLE}s" "$cs_pid"
	dnsperf_run craftstore "$cs_dns" "$cs_pid" "$WORK/queries" "$WORK/dnsperf.$headroom"
	row "  then ${DURATION}s of queries" "$cs_pid"
	cpu+=("gc_headroom $headroom: $DP_US us CPU per query at $DP_QPS qps, restart to last name answered ${restart_s}s")
	heap "$cs_pprof" "craftstore-restarted-$headroom"
done
stop_member "$cs_pid"

# Side by side with BASE_BINARY: both members up, both gc_headroom off,
# each on its copy of the bbolt file; dnsperf takes turns between them.
side=()
if [ -n "${BASE_BINARY:-}" ]; then
	cp -a "$WORK/craftstore" "$WORK/base"
	base_dns=$(free_port) base_api=$(free_port) base_ready=$(free_port) base_pprof=$(free_port)
	member_corefile base "$base_dns" "$base_api" "$base_ready" "$base_pprof" off
	cs_corefile off
	COREDNS=$WORK/coredns.base start base "$SERVER_CPU"
	base_pid=$LAST_PID
	wait_dns "$base_pid" base "$base_dns" "$last" A 600
	start craftstore "$SERVER_CPU"
	cs_pid=$LAST_PID
	wait_dns "$cs_pid" craftstore "$cs_dns" "$last" A 600
	sleep "$SETTLE"
	base_anon=$(status_kb "$base_pid" RssAnon) cs_anon=$(status_kb "$cs_pid" RssAnon)
	row "side by side: base +${SETTLE}s" "$base_pid"
	row "side by side: this build +${SETTLE}s" "$cs_pid"
	ratios=()
	for round in $(seq "$ROUNDS"); do
		dnsperf_run base "$base_dns" "$base_pid" "$WORK/queries" "$WORK/dnsperf.base.$round"
		base_us=$DP_US
		dnsperf_run craftstore "$cs_dns" "$cs_pid" "$WORK/queries" "$WORK/dnsperf.side.$round"
		ratios+=("$(calc %.2f "$DP_US / $base_us")")
		side+=("round $round: this build $DP_US us CPU per query at $DP_QPS qps, base $base_us")
	done
	row "side by side: base after the rounds" "$base_pid"
	row "side by side: this build after the rounds" "$cs_pid"
	side+=("anonymous memory this build/base after ${SETTLE}s: $(calc %.2f "$cs_anon / $base_anon")")
	side+=("CPU per query this build/base by round: ${ratios[*]} (median $(median "${ratios[@]}"))")
	stop_member "$cs_pid"
	stop_member "$base_pid"
fi

# file: the same zone file.
file_dns=$(free_port) file_pprof=$(free_port)
cat >"$WORK/file.Corefile" <<EOF
example.org:$file_dns {
    bind 127.0.0.1
    file $WORK/zone {
        reload 0
    }
$(pprof_line "$file_pprof")
}
EOF
t0=$(date +%s.%N)
start file ""
file_pid=$LAST_PID
wait_dns "$file_pid" file "$file_dns" "$last" A 600
file_s=$(calc %.1f "$(date +%s.%N) - $t0")
sleep "$SETTLE"
row "file +${SETTLE}s" "$file_pid"
heap "$file_pprof" file

echo
echo "memory with $RECORDS records (zone file $(du -m "$WORK/zone" | cut -f1) MiB); MiB, and bytes per record"
printf '%-36s %8s %8s %8s %8s %10s %10s\n' '' VmRSS RssAnon RssFile VmHWM 'RSS B/rec' 'anon B/rec'
printf '%s\n' "${rows[@]}"
echo "craftstore: PUT ${put_s}s, bbolt file ${db} MiB"
printf 'craftstore %s\n' "${cpu[@]}"
[ ${#side[@]} -eq 0 ] || echo "side by side with $BASE_BINARY:" && printf '  %s\n' "${side[@]}"
echo "file: start to last name answered ${file_s}s"
