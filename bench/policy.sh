#!/usr/bin/env bash
# policy.sh: request-routing policies on one craftstore member (issue 53),
# side by side in one run: queries/s and CPU per query for plain A names
# (the packed answers) and for names a policy answers (the issue's policy:
# weighted pools, a region and a subnet rule, a fallback), the latter also
# while bench/policyload writes POLICY_RATE policy changes a second, and
# CoreDNS's whoami (the server's path with no lookup: the bound). Every
# query carries an EDNS Client Subnet option for 192.0.2.0/24 (region
# "eu"), so every policy answer is the region's draw with scope 24. The
# member runs alone on CPU $SERVER_CPU, dnsperf and the writer on
# $LOAD_CPU. The kinds take turns, ROUNDS times; the table shows medians
# and the median of each round's ratio to the plain answers.
#
# Knobs (environment): RECORDS (100000), POLICIES (1000 names, p-0 ...),
# QUERIES (100000 lines per file), DURATION (seconds per run, 10), ROUNDS
# (3), WARMUP (5), POLICY_RATE (100 writes/s), CLIENTS (dnsperf -c, 4),
# OUTSTANDING (dnsperf -q, 200), SERVER_CPU (0), LOAD_CPU (1),
# COREDNS_BINARY, KEEP=1.
#
# It fails when the member does not start, when a policy write fails, when
# an answer is not NOERROR, or when over 1% of the queries are lost.

. "$(dirname "$0")/lib.sh"

RECORDS=${RECORDS:-100000}
POLICIES=${POLICIES:-1000}
QUERIES=${QUERIES:-100000}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
WARMUP=${WARMUP:-5}
POLICY_RATE=${POLICY_RATE:-100}
CLIENTS=${CLIENTS:-4}
OUTSTANDING=${OUTSTANDING:-200}
# ECS: family 1, source /24, scope 0, 192.0.2 (dnsperf -E code:hex).
ECS=8:00011800c00002

need dnsperf dig curl taskset ss
help=$(dnsperf -h 2>&1 || true)
case "$help" in *" -E "*) ;; *) die "this dnsperf cannot send EDNS options (-E): 2.3 or newer is needed" ;; esac

echo "# zone of $RECORDS records and $POLICIES policy names; work dir $WORK" >&2
"$GO" run "$BENCH/zonegen" -n "$RECORDS" -mix hosts -zone "$WORK/zone" 2>/dev/null
"$GO" build -o "$WORK/policyload" "$BENCH/policyload"
# Plain names: the zone's own A names, in random order.
awk '$3 == "A" && $1 ~ /^host-/ { print $1 }' "$WORK/zone" | shuf -n "$QUERIES" --random-source=<(yes) -r |
	awk '{ printf "%s.example.org A\n", $1 }' >"$WORK/plain.queries"
awk -v n="$QUERIES" -v p="$POLICIES" 'BEGIN { srand(2); for (i = 0; i < n; i++) printf "p-%d.example.org A\n", int(rand() * p) }' >"$WORK/policy.queries"

dns=$(free_port) api=$(free_port) ready=$(free_port)
cat >"$WORK/member.Corefile" <<EOC
example.org:$dns {
    bind 127.0.0.1
    craftstore {
        data $WORK/member
        api 127.0.0.1:$api
    }
    ready 127.0.0.1:$ready
}
EOC
start member "$SERVER_CPU"
pid=$LAST_PID
who_dns=$(free_port)
cat >"$WORK/whoami.Corefile" <<EOC
example.org:$who_dns {
    bind 127.0.0.1
    whoami
}
EOC
start whoami "$SERVER_CPU"
who_pid=$LAST_PID
wait_http "$pid" member "http://127.0.0.1:$ready/ready"
curl -fsS --max-time 300 -X PUT -H 'Content-Type: text/dns' --data-binary @"$WORK/zone" \
	"http://127.0.0.1:$api/v1/zones/example.org" >/dev/null || die "PUT of the zone failed"
curl -fsS --max-time 30 -X PUT -H 'Content-Type: application/json' \
	--data '{"regions": {"eu": ["192.0.2.0/24"], "us": ["198.51.100.0/24"]}}' \
	"http://127.0.0.1:$api/v1/zones/example.org/regions" >/dev/null || die "PUT of the regions failed"
# The policies, once each (at the writer's pace, on the load CPU).
taskset -c "$LOAD_CPU" "$WORK/policyload" -api "http://127.0.0.1:$api" -names "$POLICIES" -rate 2000 \
	-max "$POLICIES" -d 600s >"$WORK/seed.policyload" || die "writing the policies failed: $(cat "$WORK/seed.policyload")"
echo "# $POLICIES policies written: $(cat "$WORK/seed.policyload") (writes ok writes/s p50 p99 max ms errors)" >&2
wait_dns "$pid" member "$dns" p-0.example.org A
wait_dns "$who_pid" whoami "$who_dns" example.org A

# One answer of each, as a check: a plain A and a policy's, with scope 24.
dig +norec +subnet=192.0.2.0/24 -p "$dns" @127.0.0.1 p-1.example.org A | grep -q 'CLIENT-SUBNET: 192.0.2.0/24/24' ||
	die "the policy answer carries no ECS scope 24: $(dig +norec +subnet=192.0.2.0/24 -p "$dns" @127.0.0.1 p-1.example.org A)"

# run KIND ROUND: one dnsperf run of KIND's queries (plain, policy,
# updates: policy while the writer writes; whoami: plain, at whoami);
# appends "qps us_per_query writes_per_s" to $WORK/KIND.results.
run() {
	local kind=$1 round=$2 file=$1 out="$WORK/$1.$2.dnsperf" wpid="" port=$dns pid=$pid name=member
	[ "$kind" = updates ] && file=policy
	[ "$kind" = whoami ] && file=plain port=$who_dns pid=$who_pid name=whoami
	alive "$pid" "$name"
	if [ "$kind" = updates ]; then
		taskset -c "$LOAD_CPU" "$WORK/policyload" -api "http://127.0.0.1:$api" -names "$POLICIES" \
			-rate "$POLICY_RATE" -d "${DURATION}s" >"$WORK/updates.$round.policyload" 2>&1 &
		wpid=$!
	fi
	local t0 t1
	t0=$(cpu_ticks "$pid")
	taskset -c "$LOAD_CPU" dnsperf -s 127.0.0.1 -p "$port" -d "$WORK/$file.queries" -l "$DURATION" -n 50 \
		-c "$CLIENTS" -q "$OUTSTANDING" -t 2 -E "$ECS" >"$out" 2>&1 || { cat "$out" >&2; die "dnsperf ($kind) failed"; }
	t1=$(cpu_ticks "$pid")
	local writes=0
	if [ -n "$wpid" ]; then
		wait "$wpid" || die "policy writes failed: $(cat "$WORK/updates.$round.policyload")"
		writes=$(awk 'NR == 1 { print $3 }' "$WORK/updates.$round.policyload")
	fi
	local done lost qps noerror us
	done=$(dnsperf_field "$out" completed)
	lost=$(dnsperf_field "$out" lost)
	qps=$(dnsperf_field "$out" qps)
	noerror=$(rcode_count "$out" NOERROR)
	[ "${done:-0}" -gt 0 ] || { cat "$out" >&2; die "$kind: no query completed"; }
	[ "$noerror" -eq "$done" ] || die "$kind: unexpected rcodes: $(rcodes "$out")"
	[ "$(calc %d "$lost > 0.01 * ($done + $lost)")" = 0 ] || die "$kind: $lost queries lost of $((done + lost))"
	us=$(calc %.2f "($t1 - $t0) / $TICK_HZ * 1e6 / $done")
	printf '# round %d %-8s %9.0f qps %7s us/query  writes/s %s\n' "$round" "$kind" "$qps" "$us" "$writes" >&2
	echo "$qps $us $writes" >>"$WORK/$kind.results"
}

if [ "$WARMUP" -gt 0 ]; then
	for f in plain policy; do
		taskset -c "$LOAD_CPU" dnsperf -s 127.0.0.1 -p "$dns" -d "$WORK/$f.queries" -l "$WARMUP" -n 50 \
			-c "$CLIENTS" -q "$OUTSTANDING" -t 2 -E "$ECS" >"$WORK/warmup.dnsperf" 2>&1 ||
			{ cat "$WORK/warmup.dnsperf" >&2; die "dnsperf (warm-up) failed"; }
	done
fi
for round in $(seq "$ROUNDS"); do
	run plain "$round"
	run policy "$round"
	run updates "$round"
	run whoami "$round"
done

col() { awk -v c="$2" '{ print $c }' "$WORK/$1.results"; }
ratio() { # ratio KIND COL: the median of each round's KIND / plain
	paste "$WORK/$1.results" "$WORK/plain.results" | awk -v c="$2" '{ n = split($0, f); h = n / 2; printf "%.2f\n", f[c] / f[c + h] }'
}
printf '%-8s %10s %10s %10s %12s %12s\n' kind qps us/query writes/s "qps/plain" "us/plain"
for kind in plain policy updates whoami; do
	printf '%-8s %10.0f %10.2f %10.1f %12s %12s\n' "$kind" "$(median $(col $kind 1))" "$(median $(col $kind 2))" \
		"$(median $(col $kind 3))" "$(median $(ratio $kind 1))" "$(median $(ratio $kind 2))"
done
