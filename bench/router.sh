#!/usr/bin/env bash
# router.sh: the CPU a front costs per forwarded query. One craftstore member
# (the backend) holds a generated zone; three fronts take turns forwarding
# dnsperf's queries to it: craftroute (one shard of that one member, key
# mode name), dnsdist (no packet cache) and CoreDNS's forward plugin. Each
# front runs alone on CPU $SERVER_CPU; the backend and dnsperf share CPU
# $LOAD_CPU. CoreDNS's whoami on the same CPU gives the floor: the server's
# own cost per query, with nothing looked up or forwarded. Then a craftroute with two shards of one member each gets a
# query file with 10% missing names: the share of queries it broadcast to
# every shard, and checks that names that exist never are. See
# bench/README.md.
#
# Knobs (environment): RECORDS (100000), QUERIES (200000 lines), DURATION
# (seconds per run, 10), ROUNDS (3), CLIENTS (dnsperf -c, 4), OUTSTANDING
# (dnsperf -q, 200), SERVER_CPU (0), LOAD_CPU (1), COREDNS_BINARY, KEEP=1,
# MAP=1 (the craftroute fronts route by the agreed shard map: shard_seed),
# MULTISOCKET=N (the craftroute fronts listen on N sockets: the multisocket
# plugin; give them as many CPUs in SERVER_CPU),
# BASE_BINARY (another build: its craftroute, in front of a backend of the
# same build, runs in every round right after craftroute, and the table
# gives craftroute/base per round: two builds side by side in one run),
# MEMBER_TLS=1 (the backend serves DNS over TLS too, with a certificate from
# a CA made for the run, and the three fronts ask it over TLS: craftroute's
# tls:// member, dnsdist's tls="openssl" backend, forward's tls://; the
# 2-shard part stays plain; a BASE_BINARY must know tls:// members).
#
# It fails when a server does not start or load the zone, when any answer
# has an unexpected rcode, or when over 1% of the queries are lost.

. "$(dirname "$0")/lib.sh"

RECORDS=${RECORDS:-100000}
QUERIES=${QUERIES:-200000}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-4}
OUTSTANDING=${OUTSTANDING:-200}
MISSING=0.10

if ! command -v dnsdist >/dev/null; then
	echo "# installing dnsdist (apt-get)" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends dnsdist >&2 ||
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends dnsdist >&2; } ||
		die "dnsdist is not installed and apt-get install dnsdist failed"
fi
need dnsperf dig curl taskset ss dnsdist

"$COREDNS" -plugins | grep -q craftroute || die "$BINARY has no craftroute plugin"

echo "# zone of $RECORDS records, $QUERIES queries (none and $MISSING for missing names); work dir $WORK" >&2
"$GO" run "$BENCH/zonegen" -n "$RECORDS" -zone "$WORK/zone" -queries "$WORK/queries" \
	-nqueries "$QUERIES" -missing 0
"$GO" run "$BENCH/zonegen" -n "$RECORDS" -zone "$WORK/zone" -queries "$WORK/queries.missing" \
	-nqueries "$QUERIES" -missing "$MISSING"
nx_lines=$(grep -c '^nx-' "$WORK/queries.missing")

if [ "${MEMBER_TLS:-0}" = 1 ]; then
	"$GO" run "$BENCH/../internal/certs/gen" -dir "$WORK/certs" -members 1 -years 1
fi

# member NAME [BINARY]: a lone craftstore member on CPU $LOAD_CPU (of this
# build, or of BINARY); sets NAME_dns, NAME_api, NAME_pid, and NAME_addr
# (the address fronts ask it at: tls://127.0.0.1:PORT with MEMBER_TLS=1).
member() {
	local name=$1 bin=${2:-$COREDNS} dns api ready tls keys tlsl=""
	dns=$(free_port) api=$(free_port) ready=$(free_port)
	keys="example.org:$dns"
	eval "${name}_addr=127.0.0.1:$dns"
	if [ "${MEMBER_TLS:-0}" = 1 ]; then
		tls=$(free_port)
		keys="$keys tls://example.org:$tls"
		tlsl="    tls $WORK/certs/member1.pem $WORK/certs/member1-key.pem"
		eval "${name}_addr=tls://127.0.0.1:$tls ${name}_tls=$tls"
	fi
	cat >"$WORK/$name.Corefile" <<EOF
$keys {
    bind 127.0.0.1
$tlsl
    craftstore {
        cluster $name
        data $WORK/$name
        api 127.0.0.1:$api
$(router_key "$bin")
    }
    ready 127.0.0.1:$ready
}
EOF
	COREDNS=$bin start "$name" "$LOAD_CPU"
	wait_http "$LAST_PID" "$name" "http://127.0.0.1:$ready/ready"
	eval "${name}_dns=$dns ${name}_api=$api ${name}_pid=$LAST_PID"
}

# put NAME URL: PUT the zone to an API (a member's or a router's).
put() {
	local out
	out=$(curl -sS --max-time 300 -X PUT -H 'Content-Type: text/dns' --data-binary @"$WORK/zone" \
		-w ' %{http_code} %{time_total}' "$2/v1/zones/example.org") || die "$1: PUT of the zone failed: $out"
	case "$out" in *' 200 '*) ;; *) die "$1: PUT of the zone failed: $out" ;; esac
	echo "# $1: PUT /v1/zones/example.org in ${out##* }s" >&2
}

# The backend of the three fronts.
member backend
put backend "http://127.0.0.1:$backend_api"
wait_dns "$backend_pid" backend "$backend_dns" host-1.example.org A

# front NAME BACKEND_ADDR BINARY BACKEND_API: a craftroute of BINARY in key
# mode name, one shard whose only member is BACKEND_ADDR, on CPU
# $SERVER_CPU; sets NAME_dns and NAME_pid. With MAP=1 it routes by the
# agreed shard map (shard_api, shard_seed: it seeds epoch 1 on the
# backend), and its queries carry the map's epoch for the member to check.
front() {
	local name=$1 backend=$2 bin=$3 api=$4 dns mapl=""
	dns=$(free_port)
	if [ "${MAP:-0}" = 1 ]; then
		mapl="        shard_api a http://127.0.0.1:$api
        shard_seed http://127.0.0.1:$api"
	fi
	local ms="" tlsl=""
	[ -z "${MULTISOCKET:-}" ] || ms="    multisocket $MULTISOCKET"
	[ "${MEMBER_TLS:-0}" != 1 ] || tlsl="        tls $WORK/certs/ca.pem"
	cat >"$WORK/$name.Corefile" <<EOF
example.org:$dns {
    bind 127.0.0.1
$ms
    craftroute {
        shard a $backend
$tlsl
$mapl
$(router_key "$bin")
        key name
    }
}
EOF
	COREDNS=$bin start "$name" "$SERVER_CPU"
	eval "${name}_dns=$dns ${name}_pid=$LAST_PID"
}

# (a) craftroute: one shard, the backend its only member.
front craftroute "$backend_addr" "$COREDNS" "$backend_api"
route_dns=$craftroute_dns route_pid=$craftroute_pid

# (a') BASE_BINARY: the same front and backend from another build.
if [ -n "${BASE_BINARY:-}" ]; then
	[ -x "$BASE_BINARY" ] || die "BASE_BINARY $BASE_BINARY is not an executable"
	cp "$BASE_BINARY" "$WORK/coredns.base"
	member backendbase "$WORK/coredns.base"
	put backendbase "http://127.0.0.1:$backendbase_api"
	wait_dns "$backendbase_pid" backendbase "$backendbase_dns" host-1.example.org A
	front base "$backendbase_addr" "$WORK/coredns.base" "$backendbase_api"
	wait_dns "$base_pid" base "$base_dns" host-1.example.org A
fi

# (b) dnsdist: no packet cache (it has none unless a pool is given one).
dd_dns=$(free_port)
cat >"$WORK/dnsdist.conf" <<EOF
setLocal("127.0.0.1:$dd_dns")
setSecurityPollSuffix("")
$(if [ "${MEMBER_TLS:-0}" = 1 ]; then
		echo "newServer({address=\"127.0.0.1:$backend_tls\", name=\"backend\", tls=\"openssl\", subjectName=\"localhost\", caStore=\"$WORK/certs/ca.pem\", validateCertificates=true})"
	else
		echo "newServer({address=\"127.0.0.1:$backend_dns\", name=\"backend\"})"
	fi)
EOF
taskset -c "$SERVER_CPU" dnsdist --supervised --disable-syslog -C "$WORK/dnsdist.conf" >"$WORK/dnsdist.log" 2>&1 &
dd_pid=$!
PIDS+=("$dd_pid")

# (c) CoreDNS's forward plugin.
fwd_dns=$(free_port)
cat >"$WORK/forward.Corefile" <<EOF
example.org:$fwd_dns {
    bind 127.0.0.1
    forward . $backend_addr$([ "${MEMBER_TLS:-0}" != 1 ] || printf ' {\n        tls %s\n        tls_servername localhost\n    }' "$WORK/certs/ca.pem")
}
EOF
start forward "$SERVER_CPU"
fwd_pid=$LAST_PID

# (d) CoreDNS's whoami: no front, the floor under them all: the server's
# own path (read, unpack, plugin chain, pack, write) with no lookup and no
# forwarding. A front in a CoreDNS server block cannot cost less than this
# plus its exchange with the member.
who_dns=$(free_port)
cat >"$WORK/whoami.Corefile" <<EOF
example.org:$who_dns {
    bind 127.0.0.1
    whoami
}
EOF
start whoami "$SERVER_CPU"
who_pid=$LAST_PID

wait_dns "$route_pid" craftroute "$route_dns" host-1.example.org A
wait_dns "$dd_pid" dnsdist "$dd_dns" host-1.example.org A
wait_dns "$fwd_pid" forward "$fwd_dns" host-1.example.org A
wait_dns "$who_pid" whoami "$who_dns" host-1.example.org A

# The same answers through every front as from the backend (rcode and answer
# section of a sample of the queries with missing names).
sample() {
	head -n 300 "$WORK/queries.missing" | dig -p "$1" @127.0.0.1 +norec +noall +answer +comments +time=2 -f - 2>&1 |
		awk '/status:/ { sub(/,.*/, "", $6); print $6; next } /^[^;]/ && NF { print $1, $2, $4, $5 }'
}
sample "$backend_dns" >"$WORK/sample.backend"
for f in craftroute:$route_dns dnsdist:$dd_dns forward:$fwd_dns; do
	if ! diff "$WORK/sample.backend" <(sample "${f#*:}") >"$WORK/sample.${f%:*}.diff"; then
		head -n 20 "$WORK/sample.${f%:*}.diff" >&2
		die "${f%:*} answers differently from the backend (diff above)"
	fi
done

# run NAME PORT PID ROUND QUERYFILE NXSHARE [MODE]: one dnsperf run against a
# front (MODE tcp: over TCP, each dnsperf client on one persistent
# connection); appends "qps us_per_query cpu% others% completed" to
# $WORK/NAME.results.
run() {
	local name=$1 port=$2 pid=$3 round=$4 qfile=$5 want=$6 mode=${7:-udp} out="$WORK/$1.$4.dnsperf"
	local t0 t1 j0 j1
	alive "$pid" "$name"
	j0=$(cpu_jiffies "$SERVER_CPU")
	t0=$(cpu_ticks "$pid")
	taskset -c "$LOAD_CPU" dnsperf -s 127.0.0.1 -p "$port" -m "$mode" -d "$qfile" -l "$DURATION" -n 50 \
		-c "$CLIENTS" -q "$OUTSTANDING" -t 2 >"$out" 2>&1 || {
		cat "$out" >&2
		die "dnsperf against $name failed"
	}
	t1=$(cpu_ticks "$pid")
	j1=$(cpu_jiffies "$SERVER_CPU")
	local done lost qps noerror nxdomain got
	done=$(dnsperf_field "$out" completed)
	lost=$(dnsperf_field "$out" lost)
	qps=$(dnsperf_field "$out" qps)
	noerror=$(rcode_count "$out" NOERROR)
	nxdomain=$(rcode_count "$out" NXDOMAIN)
	[ "${done:-0}" -gt 0 ] || { cat "$out" >&2; die "$name: no query completed"; }
	[ $((noerror + nxdomain)) -eq "$done" ] || die "$name: unexpected rcodes: $(rcodes "$out")"
	got=$(calc %.4f "$nxdomain / $done")
	if [ "$(calc %d "($got - $want) > 0.01 || ($want - $got) > 0.01")" = 1 ]; then
		die "$name: NXDOMAIN share $got, expected $want: $(rcodes "$out")"
	fi
	if [ "$(calc %d "$lost > 0.01 * ($done + $lost)")" = 1 ]; then
		die "$name: $lost queries lost of $((done + lost))"
	fi
	local us cpu other
	us=$(calc %.2f "($t1 - $t0) / $TICK_HZ * 1e6 / $done")
	set -- $j0 $j1
	cpu=$(calc %.0f "($t1 - $t0) / ($4 - $2) * 100")
	other=$(calc %.0f "(o = (($3 - $1) - ($t1 - $t0)) / ($4 - $2) * 100) < 0 ? 0 : o")
	printf '# round %d %-12s %9.0f qps %7s us/query cpu %3s%% others %3s%%  %s\n' "$round" "$name" "$qps" "$us" "$cpu" "$other" "$(rcodes "$out")" >&2
	echo "$qps $us $cpu $other $done" >>"$WORK/$name.results"
}

for round in $(seq "$ROUNDS"); do
	run craftroute "$route_dns" "$route_pid" "$round" "$WORK/queries" 0
	[ -z "${BASE_BINARY:-}" ] || run base "$base_dns" "$base_pid" "$round" "$WORK/queries" 0
	run dnsdist "$dd_dns" "$dd_pid" "$round" "$WORK/queries" 0
	run forward "$fwd_dns" "$fwd_pid" "$round" "$WORK/queries" 0
	run whoami "$who_dns" "$who_pid" "$round" "$WORK/queries" 0
	# TCP clients, each on one persistent connection.
	run craftroute-tcp "$route_dns" "$route_pid" "$round" "$WORK/queries" 0 tcp
	run dnsdist-tcp "$dd_dns" "$dd_pid" "$round" "$WORK/queries" 0 tcp
done

# Broadcasts: two shards of one member each, the zone split through the
# router's API; the fronts of the first part are stopped.
for p in "$route_pid" "$dd_pid" "$fwd_pid" "$who_pid" "$backend_pid" ${base_pid:-} ${backendbase_pid:-}; do kill "$p"; done
member sha
member shb
split_dns=$(free_port) split_api=$(free_port) split_metrics=$(free_port)
cat >"$WORK/craftroute-2.Corefile" <<EOF
example.org:$split_dns {
    bind 127.0.0.1
    craftroute {
        shard a 127.0.0.1:$sha_dns
        shard b 127.0.0.1:$shb_dns
        shard_api a http://127.0.0.1:$sha_api
        shard_api b http://127.0.0.1:$shb_api
$(router_key "$COREDNS")
        key name
        api 127.0.0.1:$split_api
    }
    prometheus 127.0.0.1:$split_metrics
}
EOF
start craftroute-2 "$SERVER_CPU"
split_pid=$LAST_PID
wait_http "$split_pid" craftroute-2 "http://127.0.0.1:$split_metrics/metrics"
put craftroute-2 "http://127.0.0.1:$split_api"
wait_dns "$split_pid" craftroute-2 "$split_dns" host-1.example.org A
for s in sha shb; do
	eval "echo \"# shard ${s#sh}: \$(curl -fsS http://127.0.0.1:\$${s}_api/v1/zones)\"" >&2
done

# metric NAME: the sum of a craftroute metric's series.
metric() {
	curl -fsS "http://127.0.0.1:$split_metrics/metrics" | awk -v m="$1" '$1 == m || index($1, m "{") == 1 { s += $NF } END { printf "%d\n", s }'
}
nx_want=$(calc %.4f "$nx_lines / $QUERIES")
for round in $(seq "$ROUNDS"); do
	b0=$(metric coredns_craftroute_broadcasts_total)
	h0=$(metric coredns_craftroute_negative_cache_hits_total)
	run craftroute-2 "$split_dns" "$split_pid" "$round" "$WORK/queries.missing" "$nx_want"
	b1=$(metric coredns_craftroute_broadcasts_total)
	h1=$(metric coredns_craftroute_negative_cache_hits_total)
	echo "$((b1 - b0)) $(awk 'END { print $5 }' "$WORK/craftroute-2.results") $((h1 - h0))" >>"$WORK/broadcasts"
done

# The same with writes going on: new names added through the router's API,
# 20 a second, during one run. Each write voids only the cached answers it
# can change (its name, and the names above it), so repeated misses still
# hit the cache.
writer() {
	local i=0 end=$((SECONDS + DURATION))
	while [ "$i" -lt $((DURATION * 20)) ] && [ "$SECONDS" -lt "$end" ]; do
		curl -fsS -o /dev/null --max-time 5 -H "Content-Type: application/json" -X POST "http://127.0.0.1:$split_api/v1/zones/example.org/records" \
			-d "{\"add\": [\"bench-w$i.example.org. 60 IN A 192.0.2.1\"]}" || true
		i=$((i + 1))
		sleep 0.05
	done
	echo "$i" >"$WORK/writes"
}
writer &
writer_pid=$!
h0=$(metric coredns_craftroute_negative_cache_hits_total)
run craftroute-2-writes "$split_dns" "$split_pid" 1 "$WORK/queries.missing" "$nx_want"
h1=$(metric coredns_craftroute_negative_cache_hits_total)
wait "$writer_pid"
writes_hits=$((h1 - h0))
writes_done=$(awk 'END { print $5 }' "$WORK/craftroute-2-writes.results")

# Names that exist must not broadcast: one run with the first query file
# less its wildcard queries (a name that a wildcard answers does not exist:
# every shard is asked for the closest encloser).
grep -v '\.wild\.' "$WORK/queries" >"$WORK/queries.existing"
b0=$(metric coredns_craftroute_broadcasts_total)
run craftroute-2-existing "$split_dns" "$split_pid" 1 "$WORK/queries.existing" 0
b1=$(metric coredns_craftroute_broadcasts_total)
existing_b=$((b1 - b0))

col() { median $(awk -v c="$2" '{ print $c }' "$WORK/$1.results"); }
for s in craftroute dnsdist forward whoami craftroute-tcp dnsdist-tcp craftroute-2; do
	v=${s//-/_}
	eval "${v}_qps=\$(col $s 1) ${v}_us=\$(col $s 2) ${v}_cpu=\$(col $s 3) ${v}_other=\$(col $s 4)"
done
bshare=$(median $(awk '{ printf "%.4f\n", $1 / $2 }' "$WORK/broadcasts"))

echo
echo "fronts, $RECORDS records, ${DURATION}s x $ROUNDS rounds, medians; front on CPU $SERVER_CPU, backend and dnsperf -c $CLIENTS -q $OUTSTANDING on CPU $LOAD_CPU$([ "${MEMBER_TLS:-0}" != 1 ] || echo "; the fronts ask the backend over TLS")"
printf '%-24s %10s %14s %8s %9s %10s %12s\n' front qps 'us CPU/query' 'CPU %' 'others %' 'qps/dnsdist' 'CPU/dnsdist'
for s in craftroute dnsdist forward whoami craftroute-tcp dnsdist-tcp craftroute-2; do
	v=${s//-/_}
	label=$s
	[ "$s" = craftroute-2 ] && label="craftroute 2 shards*"
	[ "$s" = whoami ] && label="whoami (no forwarding)"
	[ "$s" = craftroute-tcp ] && label="craftroute TCP clients"
	[ "$s" = dnsdist-tcp ] && label="dnsdist TCP clients"
	eval "printf '%-24s %10.0f %14.2f %8.0f %9.0f %10s %12s\n' \"\$label\" \$${v}_qps \$${v}_us \$${v}_cpu \$${v}_other \
		x\$(calc %.2f \"\$${v}_qps / \$dnsdist_qps\") x\$(calc %.2f \"\$${v}_us / \$dnsdist_us\")"
done
if [ -n "${BASE_BINARY:-}" ]; then
	ratios=$(paste -d ' ' "$WORK/craftroute.results" "$WORK/base.results" | awk '{ printf "%.3f ", $2 / $7 }')
	printf '%-24s %10.0f %14.2f %8.0f %9.0f   craftroute/base CPU per query, per round: %s(median %s)\n' base \
		"$(col base 1)" "$(col base 2)" "$(col base 3)" "$(col base 4)" "$ratios" "$(median $ratios)"
fi
printf '  TCP clients (persistent connections) / UDP, qps: craftroute %s, dnsdist %s\n' \
	"x$(calc %.2f "$craftroute_tcp_qps / $craftroute_qps")" "x$(calc %.2f "$dnsdist_tcp_qps / $dnsdist_qps")"
hshare=$(median $(awk '{ printf "%.4f\n", $3 / $2 }' "$WORK/broadcasts"))
printf '* %s missing names; broadcast to both shards: %s of the queries (%s of the missing ones)\n' \
	"$MISSING" "$bshare" "$(calc %.2f "$bshare / $nx_want")"
printf '  negative cache hits: %s of the queries (%s of the missing ones); with %s writes through the router in the run: %s (%s)\n' \
	"$hshare" "$(calc %.2f "$hshare / $nx_want")" "$(cat "$WORK/writes")" \
	"$(calc %.4f "$writes_hits / $writes_done")" "$(calc %.2f "$writes_hits / $writes_done / $nx_want")"
printf '  existing names only (no wildcard queries): %d broadcasts in %d queries\n' "$existing_b" "$(awk '{ print $5 }' "$WORK/craftroute-2-existing.results")"
[ "$existing_b" -eq 0 ] || die "names that exist were broadcast"
