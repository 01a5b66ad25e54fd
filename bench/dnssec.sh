#!/usr/bin/env bash
# dnssec.sh: what online signing costs. One craftstore member signing the
# generated zone (dnssec, ECDSA P-256, a KSK and a ZSK) and Knot DNS with
# mod-onlinesign (ECDSA P-256, one key) on the same zone file take turns on
# CPU $SERVER_CPU, dnsperf on CPU $LOAD_CPU: each asked without DO
# (unsigned answers) and with DO (dnsperf -D: signed answers, 10% of them
# for names that do not exist: the compact denial), ROUNDS times; the table
# gives the medians of CPU per query and the ratios. The member's signature
# cache hit rate over the signed runs comes from its metrics
# (coredns_craftstore_dnssec_signatures_total). Then craftroute signing the
# same zone (dnssec in the router's block) in front of one shard of one
# member that does not sign (on CPU $LOAD_CPU): the router's CPU per query
# without and with DO, and its signature cache. See bench/README.md.
#
# Knobs (environment): RECORDS (100000), QUERIES (200000 lines), DURATION
# (seconds per run, 10), ROUNDS (3), WARMUP (seconds of signed queries
# before the rounds, 5), CLIENTS (4), OUTSTANDING (200), SERVER_CPU (0),
# LOAD_CPU (1), COREDNS_BINARY, KEEP=1.
#
# It fails when a server does not start or load the zone, when an answer
# with DO has no signature, or when any answer has an unexpected rcode.

. "$(dirname "$0")/lib.sh"

RECORDS=${RECORDS:-100000}
QUERIES=${QUERIES:-200000}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
WARMUP=${WARMUP:-5}
CLIENTS=${CLIENTS:-4}
OUTSTANDING=${OUTSTANDING:-200}
MISSING=0.10

need dnsperf dig curl taskset ss knotd

echo "# zone of $RECORDS records, $QUERIES queries ($MISSING for missing names); work dir $WORK" >&2
"$GO" run "$BENCH/zonegen" -n "$RECORDS" -zone "$WORK/zone" -queries "$WORK/queries" \
	-nqueries "$QUERIES" -missing "$MISSING"

# (a) the craftstore member, signing.
(umask 077 && head -c 32 /dev/urandom | base64 >"$WORK/kek")
cs_dns=$(free_port) cs_api=$(free_port) cs_ready=$(free_port) cs_metrics=$(free_port)
cat >"$WORK/craftstore.Corefile" <<EOF
example.org:$cs_dns {
    bind 127.0.0.1
    craftstore {
        data $WORK/craftstore
        api 127.0.0.1:$cs_api
        dnssec
        dnssec_kek $WORK/kek
    }
    ready 127.0.0.1:$cs_ready
    prometheus 127.0.0.1:$cs_metrics
}
EOF
start craftstore "$SERVER_CPU"
cs_pid=$LAST_PID
wait_http "$cs_pid" craftstore "http://127.0.0.1:$cs_ready/ready"
put=$(curl -sS --max-time 300 -X PUT -H 'Content-Type: text/dns' --data-binary @"$WORK/zone" \
	-w ' %{http_code}' "http://127.0.0.1:$cs_api/v1/zones/example.org") || die "PUT of the zone failed: $put"
case "$put" in *' 200') ;; *) die "PUT of the zone failed: $put" ;; esac
wait_http "$cs_pid" craftstore "http://127.0.0.1:$cs_api/v1/zones/example.org/ds"

# (b) Knot DNS, mod-onlinesign.
kn_dns=$(free_port)
mkdir -p "$WORK/knot/db"
cat >"$WORK/knot/knot.conf" <<EOF
server:
    listen: 127.0.0.1@$kn_dns
    rundir: $WORK/knot
database:
    storage: $WORK/knot/db
policy:
  - id: online
    algorithm: ecdsap256sha256
    single-type-signing: on
mod-onlinesign:
  - id: online
    policy: online
template:
  - id: default
    storage: $WORK/knot
    zonefile-sync: -1
    journal-content: none
zone:
  - domain: example.org
    file: $WORK/zone
    module: mod-onlinesign/online
EOF
taskset -c "$SERVER_CPU" knotd -c "$WORK/knot/knot.conf" >"$WORK/knot.log" 2>&1 &
kn_pid=$!
PIDS+=("$kn_pid")

# (c) craftroute signing in front of one shard of one member that does not
# sign (the member on CPU $LOAD_CPU, with dnsperf, as in router.sh): the
# router makes the zone's keys on the shard and signs what it answers.
sh_dns=$(free_port) sh_api=$(free_port) sh_ready=$(free_port)
cat >"$WORK/shard.Corefile" <<EOF
example.org:$sh_dns {
    bind 127.0.0.1
    craftstore {
        data $WORK/shard
        api 127.0.0.1:$sh_api
$(router_key "$COREDNS")
    }
    ready 127.0.0.1:$sh_ready
}
EOF
start shard "$LOAD_CPU"
sh_pid=$LAST_PID
wait_http "$sh_pid" shard "http://127.0.0.1:$sh_ready/ready"
put=$(curl -sS --max-time 300 -X PUT -H 'Content-Type: text/dns' --data-binary @"$WORK/zone" \
	-w ' %{http_code}' "http://127.0.0.1:$sh_api/v1/zones/example.org") || die "PUT of the zone on the shard failed: $put"
case "$put" in *' 200') ;; *) die "PUT of the zone on the shard failed: $put" ;; esac
cr_dns=$(free_port) cr_api=$(free_port) cr_metrics=$(free_port)
cat >"$WORK/craftroute.Corefile" <<EOF
example.org:$cr_dns {
    bind 127.0.0.1
    craftroute {
        shard a 127.0.0.1:$sh_dns
        shard_api a http://127.0.0.1:$sh_api
$(router_key "$COREDNS")
        api 127.0.0.1:$cr_api
        dnssec
        dnssec_kek $WORK/kek
    }
    prometheus 127.0.0.1:$cr_metrics
}
EOF
start craftroute "$SERVER_CPU"
cr_pid=$LAST_PID
wait_http "$cr_pid" craftroute "http://127.0.0.1:$cr_api/v1/zones/example.org/ds"

wait_dns "$cs_pid" craftstore "$cs_dns" host-1.example.org A
wait_dns "$kn_pid" knot "$kn_dns" host-1.example.org A
wait_dns "$cr_pid" craftroute "$cr_dns" host-1.example.org A
for s in craftstore:$cs_dns knot:$kn_dns craftroute:$cr_dns; do
	dig +dnssec +norec -p "${s#*:}" @127.0.0.1 host-1.example.org A | grep -q 'RRSIG' ||
		die "${s%:*}: no signature in an answer with DO"
done

# signatures RESULT [r]: the member's signature counter (with r, the router's).
signatures() {
	local url=http://127.0.0.1:$cs_metrics/metrics metric=coredns_craftstore_dnssec_signatures_total
	if [ -n "${2:-}" ]; then url=http://127.0.0.1:$cr_metrics/metrics metric=coredns_craftroute_dnssec_signatures_total; fi
	curl -fsS "$url" |
		awk -v r="result=\"$1\"" -v m="$metric" 'index($1, m) == 1 && index($1, r) { s += $NF } END { printf "%d\n", s }'
}

# run NAME PORT PID ROUND DO: one dnsperf run (DO 1: with the DO bit);
# appends "qps us_per_query" to $WORK/NAME.results.
run() {
	local name=$1 port=$2 pid=$3 round=$4 do=$5 out="$WORK/$1.$4.dnsperf" flag=""
	[ "$do" = 1 ] && flag=-D
	alive "$pid" "$name"
	local t0 t1
	t0=$(cpu_ticks "$pid")
	taskset -c "$LOAD_CPU" dnsperf $flag -s 127.0.0.1 -p "$port" -d "$WORK/queries" -l "$DURATION" -n 50 \
		-c "$CLIENTS" -q "$OUTSTANDING" -t 2 >"$out" 2>&1 || {
		cat "$out" >&2
		die "dnsperf against $name failed"
	}
	t1=$(cpu_ticks "$pid")
	local done lost qps noerror nxdomain
	done=$(dnsperf_field "$out" completed)
	lost=$(dnsperf_field "$out" lost)
	qps=$(dnsperf_field "$out" qps)
	noerror=$(rcode_count "$out" NOERROR)
	nxdomain=$(rcode_count "$out" NXDOMAIN)
	[ "${done:-0}" -gt 0 ] || { cat "$out" >&2; die "$name: no query completed"; }
	[ $((noerror + nxdomain)) -eq "$done" ] || die "$name: unexpected rcodes: $(rcodes "$out")"
	if [ "$(calc %d "$lost > 0.01 * ($done + $lost)")" = 1 ]; then
		die "$name: $lost queries lost of $((done + lost))"
	fi
	local us size
	us=$(calc %.2f "($t1 - $t0) / $TICK_HZ * 1e6 / $done")
	size=$(awk '/Average packet size:/ { print $7 }' "$out")
	printf '# round %d %-18s %9.0f qps %7s us/query %5s bytes  %s\n' "$round" "$name" "$qps" "$us" "$size" "$(rcodes "$out")" >&2
	echo "$qps $us $size" >>"$WORK/$name.results"
}

if [ "$WARMUP" -gt 0 ]; then
	for p in "$cs_dns" "$kn_dns" "$cr_dns"; do
		taskset -c "$LOAD_CPU" dnsperf -D -s 127.0.0.1 -p "$p" -d "$WORK/queries" -l "$WARMUP" -n 50 \
			-c "$CLIENTS" -q "$OUTSTANDING" -t 2 >"$WORK/warmup.dnsperf" 2>&1 ||
			{ cat "$WORK/warmup.dnsperf" >&2; die "dnsperf (warm-up) against port $p failed"; }
	done
fi

h0=0 m0=0 h1=0 m1=0
for round in $(seq "$ROUNDS"); do
	run craftstore "$cs_dns" "$cs_pid" "$round" 0
	h=$(signatures hit) m=$(signatures miss)
	run craftstore-signed "$cs_dns" "$cs_pid" "$round" 1
	h0=$((h0 + $(signatures hit) - h)) m0=$((m0 + $(signatures miss) - m))
	run knot "$kn_dns" "$kn_pid" "$round" 0
	run knot-signed "$kn_dns" "$kn_pid" "$round" 1
	run craftroute "$cr_dns" "$cr_pid" "$round" 0
	h=$(signatures hit r) m=$(signatures miss r)
	run craftroute-signed "$cr_dns" "$cr_pid" "$round" 1
	h1=$((h1 + $(signatures hit r) - h)) m1=$((m1 + $(signatures miss r) - m))
done

col() { median $(awk -v c="$2" '{ print $c }' "$WORK/$1.results"); }
echo
echo "online signing, $RECORDS records, ${DURATION}s x $ROUNDS rounds, medians; server on CPU $SERVER_CPU, dnsperf -c $CLIENTS -q $OUTSTANDING on CPU $LOAD_CPU; $MISSING of the queries for missing names"
printf '%-22s %10s %14s %8s %16s\n' server qps 'us CPU/query' bytes 'signed/unsigned'
for s in craftstore craftstore-signed knot knot-signed craftroute craftroute-signed; do
	base=${s%-signed}
	printf '%-22s %10.0f %14.2f %8s %16s\n' "$s" "$(col "$s" 1)" "$(col "$s" 2)" "$(col "$s" 3)" \
		"x$(calc %.2f "$(col "$s" 2) / $(col "$base" 2)")"
done
printf '  signed, craftstore/knot CPU per query: x%s; unsigned: x%s\n' \
	"$(calc %.2f "$(col craftstore-signed 2) / $(col knot-signed 2)")" "$(calc %.2f "$(col craftstore 2) / $(col knot 2)")"
printf '  signature cache (craftstore, the signed runs): %d hits, %d misses: hit rate %s\n' "$h0" "$m0" \
	"$(calc %.3f "$h0 / ($h0 + $m0)")"
printf '  signature cache (craftroute, the signed runs): %d hits, %d misses: hit rate %s\n' "$h1" "$m1" \
	"$(calc %.3f "$h1 / ($h1 + $m1)")"
printf '  craftroute: the router'"'"'s CPU alone (its member shares CPU %s with dnsperf); signed craftroute/craftstore: x%s\n' \
	"$LOAD_CPU" "$(calc %.2f "$(col craftroute-signed 2) / $(col craftstore-signed 2)")"
