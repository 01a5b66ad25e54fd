#!/usr/bin/env bash
# migrate.sh: adding and removing a shard online under load (issue 52). Two
# shards of three members hold a RECORDS-record zone (1,000,000) through a
# craftroute router in key mode name; a third shard of three members is
# added (POST /v1/shards) and then removed (DELETE /v1/shards/c), while
# bench/qload asks QPS queries a second through the router and
# bench/writeload adds WPS records a second through it. Figures, for each
# migration: its time (202 to the map without a migration), the query p99
# during it against the p99 of a window of as long before it (a ratio),
# queries lost or failed and writes failed (none expected), the router's
# and the members' RSS growth (per shard), and after adding, each shard's share of the
# records (balance).
#
# Knobs (environment): RECORDS (1000000), QPS (2000), WPS (20), BATCH
# (the router's migrate_batch; its default when unset),
# BASE_SECS (20: the window before), COREDNS_BINARY, KEEP=1; SLOW=100ms
# lists the queries slower than that in WORK/LABEL-during.slow; PPROF=1
# also takes a CPU profile of PROFILE_SECS (20) of members a1, b1 and c1
# and of the router while each migration runs (WORK/LABEL-MEMBER.cpu,
# with KEEP=1: go tool pprof -top coredns WORK/add-a1.cpu), and every
# server's craftdns metrics after it (WORK/LABEL-MEMBER.metrics; counters
# since the start), and heap profiles of a1 and c1 before and after each
# migration (WORK/LABEL-before-a1.heap, ...).

. "$(dirname "$0")/lib.sh"

RECORDS=${RECORDS:-1000000}
QPS=${QPS:-2000}
WPS=${WPS:-20}
BASE_SECS=${BASE_SECS:-20}
need curl dig jq
"$GO" build -o "$WORK/qload" "$BENCH/qload"
"$GO" build -o "$WORK/writeload" "$BENCH/writeload"
"$GO" run "$BENCH/zonegen" -n "$RECORDS" -mix hosts -zone "$WORK/zone" -queries "$WORK/queries" -missing 0.1
echo "zone: $(grep -vc '^\$' "$WORK/zone") records ($(du -h "$WORK/zone" | cut -f1))"

EXTRA_STORE="        max_zone_records $((RECORDS + 100000))"$'\n'
shard_members sharded "$COREDNS"
member_pids=("${SET_PIDS[@]}")
# Shard c, started but in no router's Corefile.
peers=""
for i in 1 2 3; do
	mdns[c$i]=$(free_port) mapi[c$i]=$(free_port) mraft[c$i]=$(free_port) mpprof[c$i]=$(free_port) mprom[c$i]=$(free_port)
done
for i in 1 2 3; do peers="$peers        peer $i 127.0.0.1:${mraft[c$i]}"$'\n'; done
for i in 1 2 3; do
	cat >"$WORK/sharded-c$i.Corefile" <<EOC
.:${mdns[c$i]} {
    bind 127.0.0.1
$(debug_at "${mpprof[c$i]}" "${mprom[c$i]}")
    craftstore {
        id $i
        cluster sharded-c
        data $WORK/sharded-data/c$i
        raft 127.0.0.1:${mraft[c$i]}
$peers        api 127.0.0.1:${mapi[c$i]}
$(router_key "$COREDNS")
$EXTRA_STORE    }
}
EOC
	start "sharded-c$i" ""
	member_pids+=("$LAST_PID")
done
r_dns=$(free_port) r_api=$(free_port) r_pprof=$(free_port) r_prom=$(free_port)
cat >"$WORK/router.Corefile" <<EOC
.:$r_dns {
    bind 127.0.0.1
$(debug_at "$r_pprof" "$r_prom")
    craftroute {
$(shard_lines)
$(router_key "$COREDNS")
        key name
        max_zone_records $((RECORDS + 100000))
${BATCH:+        migrate_batch $BATCH}
        api 127.0.0.1:$r_api
    }
}
EOC
start router ""
router_pid=$LAST_PID
put_zone router "$r_api"
wait_dns "$router_pid" router "$r_dns" example.org SOA
echo "zone imported through the router"

rss_mib() { echo $(($(status_kb "$1" VmRSS) / 1024)); }
# shards_rss prints the RSS in MiB of the three members of shards a, b and
# c (member_pids holds a1-a3, b1-b3, c1-c3 in that order).
shards_rss() {
	local i t p
	for i in 0 3 6; do
		t=0
		for p in "${member_pids[@]:i:3}"; do t=$((t + $(status_kb "$p" VmRSS))); done
		printf '%d ' $((t / 1024))
	done
}
# rss_growth BEFORE AFTER prints "a +X, b +Y, c +Z MiB" from two shards_rss.
rss_growth() {
	local -a b=($1) a=($2)
	printf 'a %+d, b %+d, c %+d MiB' $((a[0] - b[0])) $((a[1] - b[1])) $((a[2] - b[2]))
}

# heaps LABEL: with PPROF=1, the heap profiles of members a1 and c1 in
# WORK/LABEL-MEMBER.heap (go tool pprof -sample_index=inuse_space ...).
heaps() {
	[ "${PPROF:-0}" = 1 ] || return 0
	local m
	for m in a1 c1; do
		curl -s --max-time 30 -o "$WORK/$1-$m.heap" "http://127.0.0.1:${mpprof[$m]}/debug/pprof/heap?gc=1" || true
	done
}

# load SECS OUT: the query and write load for SECS (or until stop_load),
# qload's line in OUT.q, writeload's in OUT.w (clients batch requests ok
# records/s p50_ms p99_ms max_ms errors).
load() {
	local secs=$1 out=$2
	taskset -c "$LOAD_CPU" "$WORK/qload" -server "127.0.0.1:$r_dns" -queries "$WORK/queries" -rate "$QPS" -d "${secs}s" -slow "${SLOW:-0}" >"$out.q" 2>"$out.slow" &
	QLOAD=$!
	taskset -c "$LOAD_CPU" "$WORK/writeload" -api "http://127.0.0.1:$r_api" -zone example.org -c 2 -batch 1 -rate "$WPS" \
		-d "${secs}s" -max 10000000 -header=false -prefix "m$RANDOM" >"$out.w" &
	WLOAD=$!
}
stop_load() {
	kill -TERM "$QLOAD" "$WLOAD" 2>/dev/null || true # each reports what it did so far
	wait "$QLOAD" || true
	wait "$WLOAD" || true
}
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" "$2"; }

# migrate LABEL METHOD PATH BODY: run one migration under load and print
# its figures.
migrate() {
	local label=$1 method=$2 path=$3 body=$4 began secs r0 m0 code
	load "$BASE_SECS" "$WORK/$label-base"
	wait "$QLOAD" || true
	wait "$WLOAD" || true
	r0=$(rss_mib "$router_pid") m0=$(shards_rss)
	heaps "$label-before"
	load 3600 "$WORK/$label-during"
	began=$(date +%s.%N)
	code=$(curl -s -o "$WORK/$label.out" -w '%{http_code}' -X "$method" -H 'Content-Type: application/json' \
		${body:+-d "$body"} "http://127.0.0.1:$r_api$path")
	[ "$code" = 202 ] || die "$label: $method $path: $code $(cat "$WORK/$label.out")"
	local profs=()
	if [ "${PPROF:-0}" = 1 ]; then
		local m port
		for m in a1 b1 c1 router; do
			port=${mpprof[$m]:-$r_pprof}
			curl -s --max-time $((${PROFILE_SECS:-20} + 30)) -o "$WORK/$label-$m.cpu" \
				"http://127.0.0.1:$port/debug/pprof/profile?seconds=${PROFILE_SECS:-20}" &
			profs+=($!)
		done
	fi
	while :; do
		alive "$router_pid" router
		[ "$(curl -s "http://127.0.0.1:$r_api/v1/shards" | jq -c .migrating)" = null ] && break
		sleep 0.1
	done
	secs=$(calc %.1f "$(date +%s.%N) - $began")
	stop_load
	local p
	for p in "${profs[@]}"; do wait "$p" || true; done
	heaps "$label-after"
	if [ "${PPROF:-0}" = 1 ]; then
		for m in "${!mprom[@]}"; do
			curl -s --max-time 10 "http://127.0.0.1:${mprom[$m]}/metrics" | grep '^coredns_craft' >"$WORK/$label-$m.metrics" || true
		done
		curl -s --max-time 10 "http://127.0.0.1:$r_prom/metrics" | grep '^coredns_craft' >"$WORK/$label-router.metrics" || true
	fi
	local bq=$WORK/$label-base.q dq=$WORK/$label-during.q
	printf '%-9s %ss: query p99 %sms during vs %sms before (x%s), p50 %s vs %s; lost %s, servfail %s, refused %s of %s; writes: %s; RSS growth: router %d MiB, members (3 a shard) %s\n' \
		"$label" "$secs" "$(field p99_ms "$dq")" "$(field p99_ms "$bq")" \
		"$(calc %.2f "$(field p99_ms "$dq") / $(field p99_ms "$bq")")" "$(field p50_ms "$dq")" "$(field p50_ms "$bq")" \
		"$(field lost "$dq")" "$(field servfail "$dq")" "$(field refused "$dq")" "$(field queries "$dq")" \
		"$(cat "$WORK/$label-during.w")" $(($(rss_mib "$router_pid") - r0)) "$(rss_growth "$m0" "$(shards_rss)")"
}

c_members=$(printf '"127.0.0.1:%s",' "${mdns[c1]}" "${mdns[c2]}" "${mdns[c3]}")
c_api=$(printf '"http://127.0.0.1:%s",' "${mapi[c1]}" "${mapi[c2]}" "${mapi[c3]}")
migrate add POST /v1/shards "{\"name\":\"c\",\"members\":[${c_members%,}],\"api\":[${c_api%,}]}"
curl -s "http://127.0.0.1:$r_api/v1/shards" | jq -r '.shards[] | "\(.name) \(.partitions) \(.records)"' | {
	total=0 names=() parts=() recs=()
	while read -r n p r; do names+=("$n") parts+=("$p") recs+=("$r") total=$((total + r)); done
	line="balance:"
	for i in "${!names[@]}"; do line="$line ${names[$i]} ${parts[$i]} partitions, ${recs[$i]} records ($(calc %.3f "${recs[$i]} * ${#names[@]} / $total") of an even share);"; done
	echo "$line"
}
migrate remove DELETE /v1/shards/c ""
echo "c's zones after removal: $(curl -s "http://127.0.0.1:${mapi[c1]}/v1/zones")"
