#!/usr/bin/env bash
# txn.sh: RFC 2136 UPDATEs through a craftroute router in key mode name, in
# front of two shards of three members (the sharded example's layout), side
# by side in one run (issue 28):
#   - single-shard UPDATEs of one name (the common case; with BEFORE_BINARY
#     also on that binary, for the ratio to the code before transactions);
#   - UPDATEs of two names that one shard holds (forwarded whole);
#   - UPDATEs of two names on two shards (a transaction: prepare on both,
#     the decision on the coordinator, commit on both);
# each with CLIENTS clients for DURATION seconds: committed updates/s and
# latency p50/p99 (bench/updates). Then query latency through the router
# (QRATE queries/s of existing names), idle and while one-name UPDATEs,
# then cross-shard UPDATEs run; and once more while cross-shard UPDATEs run
# with HELD percent of the queries asking for a name of an UPDATE in flight,
# which its prepared part holds (issue 50: readers read past it).
#
# Knobs (environment): RECORDS (10000), CLIENTS (16), DURATION (10),
# QRATE (2000), HELD (50), BEFORE_BINARY (optional), COREDNS_BINARY, KEEP=1.

. "$(dirname "$0")/lib.sh"

RECORDS=${RECORDS:-10000}
CLIENTS=${CLIENTS:-16}
DURATION=${DURATION:-10}
QRATE=${QRATE:-2000}
HELD=${HELD:-50}
KEY=$ROOT/Corefile.examples/keys/update.key
need curl dig
if [ -n "${BEFORE_BINARY:-}" ]; then
	[ -x "$BEFORE_BINARY" ] || die "$BEFORE_BINARY is not an executable"
	cp "$BEFORE_BINARY" "$WORK/coredns-before"
fi
"$GO" build -o "$WORK/updates" "$BENCH/updates"
"$GO" run "$BENCH/zonegen" -n "$RECORDS" -zone "$WORK/zone" -queries "$WORK/queries" -nqueries 20000 -missing 0

# setup LABEL BINARY: the members and the router; sets r_dns r_api SET_PIDS.
setup() {
	local label=$1 bin=$2
	EXTRA_STORE="        allow update. * *"$'\n' shard_members "$label" "$bin" "    tsig {
        secrets $KEY
        require_opcode UPDATE
    }
"
	r_dns=$(free_port) r_api=$(free_port)
	cat >"$WORK/$label-router.Corefile" <<EOF
.:$r_dns {
    bind 127.0.0.1
    tsig {
        secrets $KEY
    }
    craftroute {
$(shard_lines)
$(router_key "$bin")
        key name
        tsig $KEY
        api 127.0.0.1:$r_api
    }
}
EOF
	COREDNS=$bin start "$label-router" ""
	SET_PIDS+=("$LAST_PID")
	put_zone "$label" "$r_api"
	wait_dns "${SET_PIDS[6]}" "$label-router" "$r_dns" host-1.example.org A
}

# updates LABEL PREFIX ARGS...: one bench/updates run through the router;
# prints its "updates" line.
updates() {
	local label=$1 prefix=$2
	shift 2
	"$WORK/updates" -server "127.0.0.1:$r_dns" -zone example.org -keyfile "$KEY" -tcp \
		-c "$CLIENTS" -d "${DURATION}s" -prefix "$prefix" "$@" >"$WORK/$label.out" 2>&1 ||
		{ cat "$WORK/$label.out" >&2; die "updates $label failed"; }
	grep '^updates\|^queries' "$WORK/$label.out"
}

field() { sed -n "s/.*$2=\([^ ]*\).*/\1/p" <<<"$1" | head -1; }

if [ -n "${BEFORE_BINARY:-}" ]; then
	setup before "$WORK/coredns-before"
	before_one=$(updates before-one b1)
	teardown
fi
setup after "$COREDNS"
one=$(updates one o1)
single=$(updates single s1 -span "http://127.0.0.1:$r_api" -pairs single)
cross=$(updates cross c1 -span "http://127.0.0.1:$r_api" -pairs cross)
load1=$(updates load1 m1 -query "127.0.0.1:$r_dns" -qnames "$WORK/queries" -qrate "$QRATE" -idle 5s)
load=$(updates load l1 -span "http://127.0.0.1:$r_api" -pairs cross -pool 8000 -query "127.0.0.1:$r_dns" -qnames "$WORK/queries" -qrate "$QRATE" -idle 5s)
held=$(updates held h1 -span "http://127.0.0.1:$r_api" -pairs cross -pool 8000 -query "127.0.0.1:$r_dns" -qnames "$WORK/queries" -qrate "$QRATE" -idle 5s -qinflight "$HELD")
teardown

echo
echo "UPDATEs through the router, two shards of three members, $CLIENTS clients over TCP, ${DURATION}s each:"
printf '%-34s %10s %8s %8s %s\n' run "updates/s" p50_ms p99_ms errors
row() { printf '%-34s %10s %8s %8s %s\n' "$1" "$(field "$2" updates_per_s)" "$(field "$2" p50_ms)" "$(field "$2" p99_ms)" "$(field "$2" errors)"; }
[ -n "${before_one:-}" ] && row "one name (before: BEFORE_BINARY)" "$before_one"
row "one name" "$one"
row "two names on one shard" "$single"
row "two names on two shards (txn)" "$cross"
echo
[ -n "${before_one:-}" ] && echo "one name, after/before: $(calc %.2f "$(field "$one" updates_per_s) / $(field "$before_one" updates_per_s)")"
echo "two shards/one shard (two names): $(calc %.2f "$(field "$cross" updates_per_s) / $(field "$single" updates_per_s)") updates/s, p99 $(calc %.2f "$(field "$cross" p99_ms) / $(field "$single" p99_ms)")x"
for run in load1 load held; do
	out=${!run}
	idle=$(grep '^queries phase=idle' <<<"$out")
	busy=$(grep '^queries phase=load' <<<"$out")
	case $run in
	load1) what="one-name UPDATEs" ;;
	load) what="cross-shard UPDATEs" ;;
	held) what="cross-shard UPDATEs, $HELD% of the queries for names they hold" ;;
	esac
	echo "queries through the router at $QRATE/s: idle p50/p99 $(field "$idle" p50_ms)/$(field "$idle" p99_ms) ms; during $what ($(field "$(grep '^updates' <<<"$out")" updates_per_s)/s) p50/p99 $(field "$busy" p50_ms)/$(field "$busy" p99_ms) ms: p99 $(calc %.2f "$(field "$busy" p99_ms) / $(field "$idle" p99_ms)")x, $(field "$busy" errors) errors, $(field "$busy" lost) lost"
done
