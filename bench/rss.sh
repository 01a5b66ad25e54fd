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
# Knobs (environment): RECORDS (1000000), SETTLE (30), PUT_TIMEOUT (1800
# seconds), DURATION (10), CLIENTS (4), OUTSTANDING (100), GC_HEADROOM (the
# second restart's gc_headroom, 25), PPROF=1 (save heap
# profiles in the work dir; with KEEP=1).

. "$(dirname "$0")/lib.sh"

RECORDS=${RECORDS:-1000000}
SETTLE=${SETTLE:-30}
PUT_TIMEOUT=${PUT_TIMEOUT:-1800}
PPROF=${PPROF:-0}
DURATION=${DURATION:-10}
CLIENTS=${CLIENTS:-4}
OUTSTANDING=${OUTSTANDING:-100}

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
# cs_corefile [HEADROOM]: the member's Corefile, with gc_headroom HEADROOM.
cs_corefile() {
	cat >"$WORK/craftstore.Corefile" <<EOF
example.org:$cs_dns {
    bind 127.0.0.1
    craftstore {
        data $WORK/craftstore
        api 127.0.0.1:$cs_api
        max_zone_records $((RECORDS + 1000))
${1:+        gc_headroom $1}
    }
    ready 127.0.0.1:$cs_ready
$(pprof_line "$cs_pprof")
}
EOF
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
	kill "$cs_pid"
	for _ in $(seq 100); do kill -0 "$cs_pid" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$cs_pid" 2>/dev/null && die "craftstore did not stop"
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
kill "$cs_pid"

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
echo "file: start to last name answered ${file_s}s"
