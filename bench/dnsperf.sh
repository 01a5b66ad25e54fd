#!/usr/bin/env bash
# dnsperf.sh: queries/s and CPU per query of one craftstore member, CoreDNS's
# file plugin serving the same zone, and CoreDNS's whoami (no lookup at all),
# all from the same binary, each pinned to CPU $SERVER_CPU with dnsperf on CPU
# $LOAD_CPU. The servers take turns, ROUNDS times, so that noise hits all of
# them alike; the table shows the medians, and the ratios of each round's
# runs (adjacent in time) with their median. See bench/README.md.
#
# Knobs (environment): RECORDS (100000), QUERIES (200000 lines), DURATION
# (seconds per run, 10), ROUNDS (3), WARMUP (seconds of queries each server
# answers before the rounds, not measured: 5), BASE_BINARY (another build:
# a second craftstore member, "base", from that binary takes its turn in
# every round after craftstore, and the ratios of each round's runs
# compare the two builds side by side; unset: none), CLIENTS (dnsperf -c, 4), OUTSTANDING
# (dnsperf -q, 200), SERVER_CPU (0), LOAD_CPU (1), COREDNS_BINARY, KEEP=1.
#
# It fails when a server does not start or load the zone, when any answer
# has an unexpected rcode (SERVFAIL, REFUSED, ...; NXDOMAIN other than for
# the missing names), or when over 1% of the queries are lost.

. "$(dirname "$0")/lib.sh"

RECORDS=${RECORDS:-100000}
QUERIES=${QUERIES:-200000}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
WARMUP=${WARMUP:-5}
CLIENTS=${CLIENTS:-4}
OUTSTANDING=${OUTSTANDING:-200}
MISSING=0.10

need dnsperf dig curl taskset ss

echo "# zone of $RECORDS records, $QUERIES queries ($MISSING for missing names); work dir $WORK" >&2
"$GO" run "$BENCH/zonegen" -n "$RECORDS" -zone "$WORK/zone" -queries "$WORK/queries" \
	-nqueries "$QUERIES" -missing "$MISSING"
nx_lines=$(grep -c '^nx-' "$WORK/queries")

# (a) one craftstore member, the zone PUT through the API.
cs_dns=$(free_port) cs_api=$(free_port) cs_ready=$(free_port)
cat >"$WORK/craftstore.Corefile" <<EOF
example.org:$cs_dns {
    bind 127.0.0.1
    craftstore {
        data $WORK/craftstore
        api 127.0.0.1:$cs_api
    }
    ready 127.0.0.1:$cs_ready
}
EOF
start craftstore "$SERVER_CPU"
cs_pid=$LAST_PID

# (a') BASE_BINARY: the same member from another build.
if [ -n "${BASE_BINARY:-}" ]; then
	[ -x "$BASE_BINARY" ] || die "BASE_BINARY $BASE_BINARY is not an executable"
	base_dns=$(free_port) base_api=$(free_port) base_ready=$(free_port)
	cat >"$WORK/base.Corefile" <<EOF
example.org:$base_dns {
    bind 127.0.0.1
    craftstore {
        data $WORK/base
        api 127.0.0.1:$base_api
    }
    ready 127.0.0.1:$base_ready
}
EOF
	cp "$BASE_BINARY" "$WORK/coredns.base"
	COREDNS=$WORK/coredns.base start base "$SERVER_CPU"
	base_pid=$LAST_PID
fi

# (b) the file plugin, same zone file.
file_dns=$(free_port)
cat >"$WORK/file.Corefile" <<EOF
example.org:$file_dns {
    bind 127.0.0.1
    file $WORK/zone {
        reload 0
    }
}
EOF
start file "$SERVER_CPU"
file_pid=$LAST_PID

# (c) whoami: CoreDNS's server with no lookup.
who_dns=$(free_port)
cat >"$WORK/whoami.Corefile" <<EOF
example.org:$who_dns {
    bind 127.0.0.1
    whoami
}
EOF
start whoami "$SERVER_CPU"
who_pid=$LAST_PID

# put_zone NAME PID READY_PORT API_PORT DNS_PORT: the zone into a member.
put_zone() {
	wait_http "$2" "$1" "http://127.0.0.1:$3/ready"
	put=$(curl -sS --max-time 300 -X PUT -H 'Content-Type: text/dns' --data-binary @"$WORK/zone" \
		-w ' %{http_code} %{time_total}' "http://127.0.0.1:$4/v1/zones/example.org") ||
		die "PUT of the zone into $1 failed: $put"
	case "$put" in *' 200 '*) ;; *) die "PUT of the zone into $1 failed: $put" ;; esac
	echo "# $1: PUT /v1/zones/example.org: $(echo ${put% * *}) in ${put##* }s" >&2
	wait_dns "$2" "$1" "$5" host-1.example.org A
}
put_zone craftstore "$cs_pid" "$cs_ready" "$cs_api" "$cs_dns"
servers="craftstore file whoami"
if [ -n "${BASE_BINARY:-}" ]; then
	put_zone base "$base_pid" "$base_ready" "$base_api" "$base_dns"
	servers="craftstore base file whoami"
fi
wait_dns "$file_pid" file "$file_dns" host-1.example.org A
wait_dns "$who_pid" whoami "$who_dns" example.org A

# The same answers from craftstore and file for a sample of the queries:
# rcode and answer section (the authority sections differ by design: NSD's
# rules, see plugin/craftstore/README.md).
sample() {
	head -n 300 "$WORK/queries" | dig -p "$1" @127.0.0.1 +norec +noall +answer +comments +time=2 -f - 2>&1 |
		awk '/status:/ { sub(/,.*/, "", $6); print $6; next } /^[^;]/ && NF { print $1, $4, $5 }'
}
if ! diff <(sample "$cs_dns") <(sample "$file_dns") >"$WORK/sample.diff"; then
	head -n 20 "$WORK/sample.diff" >&2
	die "craftstore and file answer differently (diff above; $WORK/sample.diff with KEEP=1)"
fi
if [ -n "${BASE_BINARY:-}" ] && ! diff <(sample "$base_dns") <(sample "$file_dns") >"$WORK/sample.diff"; then
	head -n 20 "$WORK/sample.diff" >&2
	die "base and file answer differently (diff above; $WORK/sample.diff with KEEP=1)"
fi

# run NAME PORT PID ROUND: one dnsperf run; appends "qps us_per_query cpu%
# others% response_bytes noerror nxdomain lost" to $WORK/NAME.results.
run() {
	local name=$1 port=$2 pid=$3 round=$4 out="$WORK/$1.$4.dnsperf"
	local t0 t1 j0 j1
	alive "$pid" "$name"
	j0=$(cpu_jiffies "$SERVER_CPU")
	t0=$(cpu_ticks "$pid")
	taskset -c "$LOAD_CPU" dnsperf -s 127.0.0.1 -p "$port" -d "$WORK/queries" -l "$DURATION" -n 50 \
		-c "$CLIENTS" -q "$OUTSTANDING" -t 2 >"$out" 2>&1 || {
		cat "$out" >&2
		die "dnsperf against $name failed"
	}
	t1=$(cpu_ticks "$pid")
	j1=$(cpu_jiffies "$SERVER_CPU")
	local done lost qps noerror nxdomain
	done=$(dnsperf_field "$out" completed)
	lost=$(dnsperf_field "$out" lost)
	qps=$(dnsperf_field "$out" qps)
	noerror=$(rcode_count "$out" NOERROR)
	nxdomain=$(rcode_count "$out" NXDOMAIN)
	[ "${done:-0}" -gt 0 ] || { cat "$out" >&2; die "$name: no query completed"; }
	if [ $((noerror + nxdomain)) -ne "$done" ]; then
		die "$name: unexpected rcodes: $(rcodes "$out")"
	fi
	# Missing names are NXDOMAIN, everything else NOERROR; whoami answers
	# NOERROR to anything.
	local want=0
	[ "$name" = whoami ] || want=$(calc %.4f "$nx_lines / $QUERIES")
	local got
	got=$(calc %.4f "$nxdomain / $done")
	if [ "$(calc %d "($got - $want) > 0.01 || ($want - $got) > 0.01")" = 1 ]; then
		die "$name: NXDOMAIN share $got, expected $want: $(rcodes "$out")"
	fi
	if [ "$(calc %d "$lost > 0.01 * ($done + $lost)")" = 1 ]; then
		die "$name: $lost queries lost of $((done + lost))"
	fi
	# The server's share of its CPU, and what others took of that CPU (a
	# busy machine shows here, not in the server's CPU per query).
	local us cpu other
	us=$(calc %.2f "($t1 - $t0) / $TICK_HZ * 1e6 / $done")
	set -- $j0 $j1
	cpu=$(calc %.0f "($t1 - $t0) / ($4 - $2) * 100")
	other=$(calc %.0f "(o = (($3 - $1) - ($t1 - $t0)) / ($4 - $2) * 100) < 0 ? 0 : o")
	printf '# round %d %-10s %9.0f qps %7s us/query cpu %3s%% others %3s%%  %s\n' "$round" "$name" "$qps" "$us" "$cpu" "$other" "$(rcodes "$out")" >&2
	local size
	size=$(awk '/Average packet size:/ { print $7 }' "$out")
	echo "$qps $us $cpu $other $size $noerror $nxdomain $lost" >>"$WORK/$name.results"
}

# Unmeasured queries first: craftstore settles after the PUT of the zone
# (the PUT's garbage collected, the collector's pace set by the zone), and
# every server's caches fill. Without, craftstore's first round was 5-10%
# above its others.
if [ "$WARMUP" -gt 0 ]; then
	for p in "$cs_dns" ${base_dns:-} "$file_dns" "$who_dns"; do
		taskset -c "$LOAD_CPU" dnsperf -s 127.0.0.1 -p "$p" -d "$WORK/queries" -l "$WARMUP" -n 50 \
			-c "$CLIENTS" -q "$OUTSTANDING" -t 2 >"$WORK/warmup.dnsperf" 2>&1 ||
			{ cat "$WORK/warmup.dnsperf" >&2; die "dnsperf (warm-up) against port $p failed"; }
	done
fi

for round in $(seq "$ROUNDS"); do
	run craftstore "$cs_dns" "$cs_pid" "$round"
	[ -z "${BASE_BINARY:-}" ] || run base "$base_dns" "$base_pid" "$round"
	run file "$file_dns" "$file_pid" "$round"
	run whoami "$who_dns" "$who_pid" "$round"
done

col() { median $(awk -v c="$2" '{ print $c }' "$WORK/$1.results"); }
for s in $servers; do
	eval "${s}_qps=\$(col $s 1) ${s}_us=\$(col $s 2) ${s}_cpu=\$(col $s 3) ${s}_other=\$(col $s 4) ${s}_size=\$(col $s 5)"
done

echo
echo "dnsperf, $RECORDS records, ${DURATION}s x $ROUNDS rounds, medians; server on CPU $SERVER_CPU, dnsperf -c $CLIENTS -q $OUTSTANDING on CPU $LOAD_CPU"
printf '%-12s %10s %14s %8s %9s %8s\n' server qps 'us CPU/query' 'CPU %' 'others %' 'resp B'
for s in $servers; do
	eval "printf '%-12s %10.0f %14.2f %8.0f %9.0f %8.0f\n' $s \$${s}_qps \$${s}_us \$${s}_cpu \$${s}_other \$${s}_size"
done
printf '%-20s qps x%s, CPU/query x%s\n' craftstore/file: \
	"$(calc %.2f "$craftstore_qps / $file_qps")" "$(calc %.2f "$craftstore_us / $file_us")"
printf '%-20s qps x%s, CPU/query x%s\n' craftstore/whoami: \
	"$(calc %.2f "$craftstore_qps / $whoami_qps")" "$(calc %.2f "$craftstore_us / $whoami_us")"
# The machine's speed drifts (a shared host): the ratio of runs next to
# each other in one round is steadier than the ratio of medians.
for other in ${BASE_BINARY:+base} file whoami; do
	ratios=$(paste -d' ' "$WORK/craftstore.results" "$WORK/$other.results" | awk '{ printf "%.2f ", $2 / $10 }')
	printf '%-20s CPU/query per round: %s(median x%s)\n' "craftstore/$other:" "$ratios" "$(median $ratios)"
done
