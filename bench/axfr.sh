#!/usr/bin/env bash
# axfr.sh: zone transfers of a large zone, side by side in one run (issue
# 29): AXFR of a RECORDS-record zone (1,000,000) through a craftroute router
# in key mode name in front of two shards of three members (the router
# merges the shards' snapshots), and AXFR of the same zone from one member
# that holds it whole. For each: the transfer's time (bench/xfrtime, the
# median of RUNS), the records received, and the serving process's memory:
# its RSS before the transfers and its peak RSS during them (VmHWM, reset
# before the transfers through /proc/PID/clear_refs), so the growth a
# transfer costs. The router must not grow with the zone.
#
# Knobs (environment): RECORDS (1000000), RUNS (3), COREDNS_BINARY, KEEP=1.

. "$(dirname "$0")/lib.sh"

RECORDS=${RECORDS:-1000000}
RUNS=${RUNS:-3}
need curl dig
"$GO" build -o "$WORK/xfrtime" "$BENCH/xfrtime"
"$GO" run "$BENCH/zonegen" -n "$RECORDS" -mix hosts -zone "$WORK/zone"
echo "zone: $(grep -vc '^\$' "$WORK/zone") records ($(du -h "$WORK/zone" | cut -f1))"

# measure LABEL VAR PID PORT: RUNS AXFRs of example.org from
# 127.0.0.1:PORT, served by PID; prints one line of figures and sets
# VAR_secs (the median time) and VAR_growth (MiB).
measure() {
	local label=$1 var=$2 pid=$3 port=$4 i out secs=() recs rss hwm
	rss=$(status_kb "$pid" VmRSS)
	echo 5 >"/proc/$pid/clear_refs" # VmHWM := VmRSS
	for i in $(seq "$RUNS"); do
		out=$("$WORK/xfrtime" -server "127.0.0.1:$port" -zone example.org) || die "$label: AXFR failed"
		secs+=("$(sed -n 's/.*seconds=\([^ ]*\).*/\1/p' <<<"$out")")
		recs=$(sed -n 's/.*records=\([^ ]*\).*/\1/p' <<<"$out")
	done
	hwm=$(status_kb "$pid" VmHWM)
	printf '%-34s records=%s seconds=%s (median of %s) rss_before=%dMiB peak=%dMiB growth=%dMiB\n' \
		"$label" "$recs" "$(median "${secs[@]}")" "$RUNS" $((rss / 1024)) $((hwm / 1024)) $(((hwm - rss) / 1024))
	printf -v "${var}_secs" '%s' "$(median "${secs[@]}")"
	printf -v "${var}_growth" '%s' $(((hwm - rss) / 1024))
}

# One member holding the whole zone.
s_dns=$(free_port) s_api=$(free_port)
cat >"$WORK/single.Corefile" <<EOC
.:$s_dns {
    bind 127.0.0.1
    transfer {
        to *
    }
    craftstore {
        data $WORK/single-data
        api 127.0.0.1:$s_api
        max_zone_records $((RECORDS + 1000))
    }
}
EOC
start single ""
single_pid=$LAST_PID
put_zone single "$s_api"
wait_dns "$single_pid" single "$s_dns" example.org SOA

# Two shards of three members and a router in key mode name.
shard_members sharded "$COREDNS"
r_dns=$(free_port) r_api=$(free_port)
cat >"$WORK/router.Corefile" <<EOC
.:$r_dns {
    bind 127.0.0.1
    transfer {
        to *
    }
    craftroute {
$(shard_lines)
$(router_key "$COREDNS")
        key name
        max_zone_records $((RECORDS + 1000))
        api 127.0.0.1:$r_api
    }
}
EOC
start router ""
router_pid=$LAST_PID
put_zone router "$r_api"
# The import grew the router (it parsed the zone file): restart it, so that
# its memory is what routing and transfers take.
kill "$router_pid"
for _ in $(seq 50); do kill -0 "$router_pid" 2>/dev/null || break; sleep 0.1; done
start router ""
router_pid=$LAST_PID
wait_dns "$router_pid" router "$r_dns" example.org SOA

measure "one member" member "$single_pid" "$s_dns"
measure "router, 2 shards x 3 members" router "$router_pid" "$r_dns"
echo "AXFR time, router / one member: x$(calc %.2f "$router_secs / $member_secs"); peak RSS growth: router ${router_growth} MiB, member ${member_growth} MiB"
