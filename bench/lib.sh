# Helpers shared by the benchmark scripts in bench/ (sourced, not run).
#
# Every server a script starts is recorded in PIDS and stopped on exit; all
# files go to a fresh directory WORK under $TMPDIR, removed on exit unless
# KEEP=1. All traffic is to 127.0.0.1.

set -euo pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
BINARY=${COREDNS_BINARY:-$ROOT/coredns}
SERVER_CPU=${SERVER_CPU:-0} # the server under test runs alone on this CPU
LOAD_CPU=${LOAD_CPU:-1}     # dnsperf and the load generators run here
GO=${GO:-go}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/craftdns-bench.XXXXXX")
PIDS=()
PORTS=" "

cleanup() {
	local rc=$? p
	trap - EXIT INT TERM
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
	done
	if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Run a copy of the binary: a rebuild of ./coredns during the run does not
# change what is measured.
[ -x "$BINARY" ] || { echo "$BINARY not built (make)" >&2; exit 1; }
COREDNS=$WORK/coredns
cp "$BINARY" "$COREDNS"

die() { echo "$(basename "$0"): $*" >&2; exit 1; }

# ROUTER_KEY is router_key of the benchmarks' routers and shard members.
ROUTER_KEY=bench-router-key-0123456789abcdef
# router_key BINARY prints the router_key line of a craftstore or craftroute
# block for that build (none for a build from before router_key, such as a
# BEFORE_BINARY).
router_key() {
	if grep -q 'router_key is needed' "$1" 2>/dev/null; then echo "        router_key $ROUTER_KEY"; fi
}

need() {
	local t
	for t in "$@"; do command -v "$t" >/dev/null || die "$t is not installed"; done
}

# free_port prints a loopback port that is free for TCP and UDP and was not
# handed out before in this run.
free_port() {
	local p
	for _ in $(seq 200); do
		p=$((20000 + RANDOM % 40000))
		case "$PORTS" in *" $p "*) continue ;; esac
		if [ -z "$(ss -Htuan "( sport = :$p )" 2>/dev/null)" ]; then
			PORTS="$PORTS$p "
			echo "$p"
			return
		fi
	done
	die "no free port found"
}

# start NAME CPU: start the binary on $WORK/NAME.Corefile (written by the
# caller), pinned to CPU unless CPU is empty; its pid is left in LAST_PID,
# its output in $WORK/NAME.log.
start() {
	local name=$1 cpu=$2
	if [ -n "$cpu" ]; then
		taskset -c "$cpu" "$COREDNS" -conf "$WORK/$name.Corefile" >"$WORK/$name.log" 2>&1 &
	else
		"$COREDNS" -conf "$WORK/$name.Corefile" >"$WORK/$name.log" 2>&1 &
	fi
	LAST_PID=$!
	PIDS+=("$LAST_PID")
}

# alive PID NAME: fail with the end of NAME's log when PID is gone.
alive() {
	kill -0 "$1" 2>/dev/null && return
	echo "--- $WORK/$2.log" >&2
	tail -n 30 "$WORK/$2.log" >&2 || true
	die "$2 exited"
}

# wait_dns PID NAME PORT QNAME QTYPE [SECONDS]: wait until the server
# answers QNAME/QTYPE with NOERROR.
wait_dns() {
	local pid=$1 name=$2 port=$3 qname=$4 qtype=$5 secs=${6:-60}
	local end=$((SECONDS + secs))
	while [ $SECONDS -lt $end ]; do
		alive "$pid" "$name"
		if dig +time=1 +tries=1 +norec -p "$port" @127.0.0.1 "$qname" "$qtype" 2>/dev/null |
			grep -q 'status: NOERROR'; then
			return
		fi
		sleep 0.2
	done
	die "$name: no answer for $qname $qtype on port $port after ${secs}s"
}

# wait_http PID NAME URL [SECONDS]: wait until URL answers 200.
wait_http() {
	local pid=$1 name=$2 url=$3 secs=${4:-60}
	local end=$((SECONDS + secs))
	while [ $SECONDS -lt $end ]; do
		alive "$pid" "$name"
		curl -fs -o /dev/null --max-time 2 "$url" && return
		sleep 0.2
	done
	die "$name: $url not ready after ${secs}s"
}

# cpu_ticks PID prints utime+stime of PID in clock ticks.
cpu_ticks() {
	local stat
	read -r stat <"/proc/$1/stat"
	# Fields after the ")" closing the command name start at field 3.
	set -- ${stat##*) }
	echo $((${12} + ${13}))
}

TICK_HZ=$(getconf CLK_TCK)

# cpu_jiffies CPU prints "busy total" clock ticks of CPU (/proc/stat): how
# busy the machine was, whoever made it so.
cpu_jiffies() {
	awk -v c="cpu$1" '$1 == c { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t }' /proc/stat
}

# status_kb PID FIELD prints FIELD (VmRSS, RssAnon, RssFile, VmHWM) of
# /proc/PID/status in KiB.
status_kb() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"; }

# dnsperf_field FILE prints a figure from dnsperf's output: completed, lost,
# qps, latency (average, in seconds).
dnsperf_field() {
	case $2 in
	completed) awk '/Queries completed:/ { print $3 }' "$1" ;;
	lost) awk '/Queries lost:/ { print $3 }' "$1" ;;
	qps) awk '/Queries per second:/ { print $4 }' "$1" ;;
	latency) awk '/Average Latency/ { print $4 }' "$1" ;;
	latmax) awk '/Average Latency/ { sub(/\)/, "", $8); print $8 }' "$1" ;;
	stddev) awk '/Latency StdDev/ { print $4 }' "$1" ;;
	esac
}

# rcode_count FILE RCODE prints how many answers had RCODE (0 if none).
rcode_count() {
	awk -v rc="$2" '/Response codes:/ {
		for (i = 3; i <= NF; i++) if ($i == rc) { n = $(i + 1); gsub(/[^0-9]/, "", n); print n; exit }
		print 0; exit }' "$1"
}

# rcodes FILE prints the response codes line of dnsperf's output.
rcodes() { sed -n 's/^ *Response codes: *//p' "$1"; }

# calc FORMAT EXPR prints the floating point awk expression EXPR with the
# printf FORMAT, e.g. calc %.2f "3 / 2".
calc() { awk "BEGIN { printf \"$1\", ($2) }"; }

# median prints the median of its arguments.
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# shard_members LABEL BINARY EXTRA: start two shards, a and b, of three
# craftstore members each on free ports (the sharded example's layout),
# EXTRA added to every member's server block (a tsig block, say) and to its
# craftstore block after its api line (EXTRA_STORE). Sets the associative
# arrays mdns, mapi, mraft (member → port) and starts SET_PIDS with the
# members' pids.
# debug_at PPROF PROM prints, with PPROF=1, a server block's pprof and
# prometheus lines on those ports (bench/migrate.sh's profiles and metrics).
debug_at() { [ "${PPROF:-0}" = 1 ] && printf '    pprof 127.0.0.1:%s\n    prometheus 127.0.0.1:%s\n' "$1" "$2" || true; }

shard_members() {
	local label=$1 bin=$2 extra=${3:-} sh i m peers
	SET_PIDS=()
	declare -gA mdns mapi mraft mpprof mprom
	for sh in a b; do
		for i in 1 2 3; do
			m=$sh$i
			mdns[$m]=$(free_port) mapi[$m]=$(free_port) mraft[$m]=$(free_port) mpprof[$m]=$(free_port) mprom[$m]=$(free_port)
		done
	done
	for sh in a b; do
		peers=""
		for i in 1 2 3; do peers="$peers        peer $i 127.0.0.1:${mraft[$sh$i]}"$'\n'; done
		for i in 1 2 3; do
			m=$sh$i
			cat >"$WORK/$label-$m.Corefile" <<EOC
.:${mdns[$m]} {
    bind 127.0.0.1
$(debug_at "${mpprof[$m]}" "${mprom[$m]}")
$extra    craftstore {
        id $i
        cluster $label-$sh
        data $WORK/$label-data/$m
        raft 127.0.0.1:${mraft[$m]}
$peers        api 127.0.0.1:${mapi[$m]}
$(router_key "$bin")
${EXTRA_STORE:-}    }
}
EOC
			COREDNS=$bin start "$label-$m" ""
			SET_PIDS+=("$LAST_PID")
		done
	done
}

# shard_lines prints the shard and shard_api lines of a craftroute block
# for the members shard_members started.
shard_lines() {
	local sh
	for sh in a b; do
		echo "        shard $sh 127.0.0.1:${mdns[${sh}1]} 127.0.0.1:${mdns[${sh}2]} 127.0.0.1:${mdns[${sh}3]}"
	done
	for sh in a b; do
		echo "        shard_api $sh http://127.0.0.1:${mapi[${sh}1]} http://127.0.0.1:${mapi[${sh}2]} http://127.0.0.1:${mapi[${sh}3]}"
	done
}

# put_zone LABEL API: import $WORK/zone as example.org through the router
# API at 127.0.0.1:API, retrying for a minute while the shards come up.
put_zone() {
	local label=$1 api=$2 out end=$((SECONDS + 60))
	while :; do
		out=$(curl -sS --max-time 300 -X PUT -H 'Content-Type: text/dns' --data-binary @"$WORK/zone" -w ' %{http_code}' \
			"http://127.0.0.1:$api/v1/zones/example.org" 2>&1) && [ "${out##* }" = 200 ] && break
		[ $SECONDS -lt $end ] || die "$label: PUT of the zone failed: $out"
		sleep 1
	done
}

# teardown: stop the servers in SET_PIDS and wait for them.
teardown() {
	local p
	for p in "${SET_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${SET_PIDS[@]}"; do
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
	done
}

# dnsperf_run NAME PORT PID QFILE OUT: one dnsperf run of DURATION seconds
# (CLIENTS, OUTSTANDING) from CPU $LOAD_CPU against the server PID
# answering on PORT, its output in OUT. It fails when no query completed,
# an answer was neither NOERROR nor NXDOMAIN, or over 1% were lost, and sets
# DP_DONE (queries completed), DP_QPS, DP_NX (NXDOMAIN share) and DP_US
# (CPU microseconds of PID per completed query).
dnsperf_run() {
	local name=$1 port=$2 pid=$3 qfile=$4 out=$5 t0 t1 lost noerror nxdomain
	alive "$pid" "$name"
	t0=$(cpu_ticks "$pid")
	taskset -c "$LOAD_CPU" dnsperf -s 127.0.0.1 -p "$port" -d "$qfile" -l "$DURATION" -n 50 \
		-c "$CLIENTS" -q "$OUTSTANDING" -t 2 >"$out" 2>&1 || { cat "$out" >&2; die "dnsperf against $name failed"; }
	t1=$(cpu_ticks "$pid")
	DP_DONE=$(dnsperf_field "$out" completed)
	lost=$(dnsperf_field "$out" lost)
	DP_QPS=$(dnsperf_field "$out" qps)
	noerror=$(rcode_count "$out" NOERROR)
	nxdomain=$(rcode_count "$out" NXDOMAIN)
	[ "${DP_DONE:-0}" -gt 0 ] || { cat "$out" >&2; die "$name: no query completed"; }
	[ $((noerror + nxdomain)) -eq "$DP_DONE" ] || die "$name: unexpected rcodes: $(rcodes "$out")"
	[ "$(calc %d "$lost > 0.01 * ($DP_DONE + $lost)")" = 0 ] || die "$name: $lost queries lost of $((DP_DONE + lost))"
	DP_NX=$(calc %.4f "$nxdomain / $DP_DONE")
	DP_US=$(calc %.2f "($t1 - $t0) / $TICK_HZ * 1e6 / $DP_DONE")
}
