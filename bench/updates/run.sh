#!/usr/bin/env bash
# run.sh: RFC 2136 UPDATE throughput of a three-member craftstore group next
# to CoreDNS's dynupdate (one server, its bbolt database on), and query
# latency on the member taking the updates, idle and under that load.
#
# For each zone size in SIZES it generates a zone (bench/zonegen), then:
#  1. starts three craftstore members on loopback (fresh data directories,
#     free ports, TSIG with Corefile.examples/keys/update.key through the
#     tsig plugin, `allow update. * *`), the zone seeded by member 1 (when
#     all three seed a zone of 100k records their imports keep superseding
#     each other and none completes);
#  2. runs bench/updates against the leader (UPDATE_TO=follower: a
#     follower): queries only for IDLE seconds, then CLIENTS clients each
#     adding one A record per TSIG-signed UPDATE for DURATION seconds while
#     the queries go on; committed updates/s (NOERROR answers), update
#     latency p50/p99, query latency idle and under the updates;
#  3. checks that a sample of acknowledged names is on every member and that
#     every member holds the seeded records plus at least every
#     acknowledged one, then stops the members;
#  4. does the same with one CoreDNS server whose dynupdate plugin serves
#     the zone with a database (durable: each update committed to bbolt
#     before the answer).
# With PIN=1 (the default) the server taking the updates runs alone on CPU
# $SERVER_CPU; the load client and the other two members share CPU
# $LOAD_CPU.
#
# Knobs (environment): SIZES (1000 10000 100000), CLIENTS (64), DURATION (10),
# IDLE (5), QRATE (2000 queries/s), UPDATE_TO (leader), PIN (1), KEEP=1.

. "$(dirname "$0")/../lib.sh"

SIZES=${SIZES:-1000 10000 100000}
CLIENTS=${CLIENTS:-64}
DURATION=${DURATION:-10}
IDLE=${IDLE:-5}
QRATE=${QRATE:-2000}
UPDATE_TO=${UPDATE_TO:-leader}
PIN=${PIN:-1}
KEY=$ROOT/Corefile.examples/keys/update.key

need dig curl jq taskset ss

"$GO" build -o "$WORK/updates" "$BENCH/updates"
declare -a dns api raft ready pid

# on CPU CMD...: run CMD on CPU when pinning.
on() {
	local cpu=$1
	shift
	if [ "$PIN" = 1 ]; then taskset -c "$cpu" "$@"; else "$@"; fi
}
pin() { [ "$PIN" = 1 ] && taskset -a -p -c "$2" "$1" >/dev/null || true; }

# stop PID...: stop servers and wait for them to go.
stop() {
	local p
	for p in "$@"; do kill "$p" 2>/dev/null || true; done
	for p in "$@"; do
		for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
	done
}

# records I prints the number of records in example.org on member I.
records() {
	curl -fsS --max-time 30 "http://127.0.0.1:${api[$1]}/v1/zones" | jq -r '.[] | select(.zone == "example.org.") | .records'
}

# field KEY FILE LINE prints KEY's value on the line of FILE starting with LINE.
field() { awk -v k="$1" -v l="$3" 'index($0, l) == 1 { for (i = 1; i <= NF; i++) if (index($i, k "=") == 1) { print substr($i, length(k) + 2); exit } }' "$2"; }

# load NAME ADDR VERIFY: bench/updates against ADDR, queries at ADDR too,
# acknowledged names checked at VERIFY; the output in $WORK/NAME.out.
load() {
	on "$LOAD_CPU" "$WORK/updates" -server "$2" -keyfile "$KEY" -zone example.org -c "$CLIENTS" -d "${DURATION}s" \
		-query "$2" -qnames "$WORK/queries.$size" -qrate "$QRATE" -idle "${IDLE}s" -verify "$3" -prefix "$1" \
		>"$WORK/$1.out" 2>&1 || { cat "$WORK/$1.out" >&2; die "$1: load client failed"; }
}

# row NAME SERVER prints one line of the result table.
row() {
	local f=$WORK/$1.out
	printf '%-8s %-21s %9s %7s %8s %8s  %8s %8s  %8s %8s %5s %6s  %s\n' "$size" "$2" \
		"$(field updates_per_s "$f" updates)" "$(field ok "$f" updates)" \
		"$(field p50_ms "$f" updates)" "$(field p99_ms "$f" updates)" \
		"$(field p50_ms "$f" 'queries phase=idle')" "$(field p99_ms "$f" 'queries phase=idle')" \
		"$(field p50_ms "$f" 'queries phase=load')" "$(field p99_ms "$f" 'queries phase=load')" \
		"$(field errors "$f" 'queries phase=load')" "$(field lost "$f" 'queries phase=load')" \
		"$(field errors "$f" updates)"
}

echo "# $(nproc) CPUs; $CLIENTS clients, ${DURATION}s of updates; queries at ${QRATE}/s on the server taking the updates, ${IDLE}s idle first; PIN=$PIN; work dir $WORK"
echo "# upd: committed (NOERROR) updates/s and their latency in ms; q_idle/q_load: query latency in ms idle and"
echo "# under the updates, $QRATE queries/s sent whatever the answers do; q_err: answers other than NOERROR/NXDOMAIN;"
echo "# q_lost: queries under the updates still unanswered a second after the run"
printf '%-8s %-21s %9s %7s %8s %8s  %8s %8s  %8s %8s %5s %6s  %s\n' records server 'upd/s' ok upd_p50 upd_p99 \
	'q_idle50' 'q_idle99' 'q_load50' 'q_load99' 'q_err' 'q_lost' 'update errors'

for size in $SIZES; do
	"$GO" run "$BENCH/zonegen" -n "$size" -zone "$WORK/zone.$size" -queries "$WORK/queries.$size" -nqueries 50000 2>/dev/null

	# craftstore: three members.
	for i in 1 2 3; do
		dns[i]=$(free_port) api[i]=$(free_port) raft[i]=$(free_port) ready[i]=$(free_port)
	done
	for i in 1 2 3; do
		cat >"$WORK/cs$size-m$i.Corefile" <<EOF
example.org:${dns[i]} {
    bind 127.0.0.1
    tsig {
        secrets $KEY
        require_opcode UPDATE
    }
    craftstore {
        id $i
        data $WORK/cs$size/m$i
        peer 1 127.0.0.1:${raft[1]}
        peer 2 127.0.0.1:${raft[2]}
        peer 3 127.0.0.1:${raft[3]}
        $([ "$i" = 1 ] && echo "seed example.org $WORK/zone.$size")
        api 127.0.0.1:${api[i]}
        allow update. * *
    }
    ready 127.0.0.1:${ready[i]}
}
EOF
		start "cs$size-m$i" ""
		pid[i]=$LAST_PID
	done
	for i in 1 2 3; do
		wait_http "${pid[i]}" "cs$size-m$i" "http://127.0.0.1:${ready[i]}/ready" 120
		wait_dns "${pid[i]}" "cs$size-m$i" "${dns[i]}" example.org SOA 120
	done
	L=$(curl -fsS --max-time 5 "http://127.0.0.1:${api[1]}/v1/cluster" | jq -r .leader)
	[ "$L" -ge 1 ] 2>/dev/null || die "no leader"
	case $UPDATE_TO in leader) T=$L ;; follower) T=$((L % 3 + 1)) ;; *) die "UPDATE_TO: $UPDATE_TO" ;; esac
	initial=$(records "$T")
	for i in 1 2 3; do
		if [ "$i" = "$T" ]; then pin "${pid[i]}" "$SERVER_CPU"; else pin "${pid[i]}" "$LOAD_CPU"; fi
	done

	load "cs$size" "127.0.0.1:${dns[T]}" "127.0.0.1:${dns[1]},127.0.0.1:${dns[2]},127.0.0.1:${dns[3]}"
	row "cs$size" "craftstore m$T/$UPDATE_TO"

	acked=$(field ok "$WORK/cs$size.out" updates)
	sent=$(field sent "$WORK/cs$size.out" updates)
	end=$((SECONDS + 60))
	while :; do
		r1=$(records 1) r2=$(records 2) r3=$(records 3)
		[ "$r1" = "$r2" ] && [ "$r2" = "$r3" ] && break
		[ $SECONDS -lt $end ] || die "members disagree after 60s: $r1 $r2 $r3 records"
		sleep 1
	done
	[ "$r1" -ge $((initial + acked)) ] || die "acknowledged records are missing: $r1 < $initial + $acked"
	[ "$r1" -le $((initial + sent)) ] || die "more records than were sent: $r1 > $initial + $sent"
	stop "${pid[1]}" "${pid[2]}" "${pid[3]}"

	# dynupdate: one server, the database on.
	dport=$(free_port) dready=$(free_port)
	mkdir -p "$WORK/dyn$size"
	cat >"$WORK/dyn$size.Corefile" <<EOF
example.org:$dport {
    bind 127.0.0.1
    tsig {
        secrets $KEY
        require_opcode UPDATE
    }
    dynupdate {
        file $WORK/zone.$size
        database $WORK/dyn$size/example.org.db
        allow update. * *
        max_records 10000000
        max_bytes 1073741824
    }
    ready 127.0.0.1:$dready
}
EOF
	start "dyn$size" ""
	dpid=$LAST_PID
	wait_http "$dpid" "dyn$size" "http://127.0.0.1:$dready/ready" 120
	wait_dns "$dpid" "dyn$size" "$dport" example.org SOA 120 # creates the database from the seed
	pin "$dpid" "$SERVER_CPU"
	load "dyn$size" "127.0.0.1:$dport" "127.0.0.1:$dport"
	row "dyn$size" "dynupdate (database)"
	stop "$dpid"
done
