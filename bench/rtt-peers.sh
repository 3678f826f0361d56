#!/usr/bin/env bash
# rtt-peers.sh: side-by-side loopback round-trip times, `gridperf rtt` against
# sockperf, NetPIPE (NPtcp) and qperf, at the same message sizes and CPU placement.
#
# Modes (see bench/README.md):
#   A  same-cpu blocking   server and client both pinned to CPU 0, blocking sockets.
#                          Peers: sockperf (tcp, udp), NPtcp (tcp), qperf (tcp_lat, udp_lat).
#   B  busy-poll two-cpu   server on CPU 1, client on CPU 0, both ends spinning.
#                          Peers: sockperf --nonblocked (the only peer that can spin).
#   C  two-cpu blocking    server on CPU 1, client on CPU 0, blocking (opt-in: --modes A,B,C).
#                          Peers: as in mode A.
#
# Every tool run is bounded by timeout(1); servers are started per tool and
# protocol, killed by PID when done and, whatever happens, on exit.
# All traffic goes to 127.0.0.1. Raw logs stay in the work directory; parsed
# results are written as JSON to --out and printed as one table per mode by
# bench/compare.py.
BENCH_ARGS="$*" # the command line, for run_header (bench/lib.sh)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)

DUR=3                     # --seconds: per tool per size
ITER=""                   # --iterations: gridperf, per point (default: time it like the peers, -t SECONDS)
ROUNDS=1                  # --repeat: whole rounds, interleaving the tools in time
SIZES=1,64,1460,4096,16384,65536
MODES=A,B
TOOLS=gridperf,sockperf,nptcp,qperf
OUT=""
WORKDIR=""
PORT_BASE=23100
QUIET_WAIT=60             # --quiet-wait: max seconds to wait for idle CPUs before each run
QUIET_PCT=15              # a CPU counts as idle below this busy percentage
NO_BUILD=0
MARKDOWN=0
ORDER=size                # --order: size (every tool at a size, then the next size) or tool
GRIDPERF=${GRIDPERF:-$REPO/target/release/gridperf}
HOST=127.0.0.1
UDP_MAX=65507             # largest UDP payload over IPv4
SOCKPERF_MIN=14           # sockperf refuses -m below 14 (its header)
SOCKPERF_MAX=65507        # and above 65507, for TCP too
NP_TRIALS=3               # NetPIPE 3.7 times each point TRIALS=3 times, keeps the best

usage() {
    cat <<EOF
Usage: bench/rtt-peers.sh [options]

  --seconds S        seconds per peer tool per size (integer, default $DUR)
  --iterations N     gridperf round trips per point (default: none; gridperf runs
                     -t SECONDS per point, as long as each peer tool)
  --repeat R         run every mode R times, round after round, and report per
                     cell the median over rounds (default $ROUNDS; 3 recommended on
                     a shared or virtual machine, where medians drift between runs)
  --sizes LIST       message sizes in bytes (default $SIZES);
                     for UDP any size above $UDP_MAX is run at $UDP_MAX
  --modes LIST       A (same-cpu blocking), B (busy-poll two-cpu),
                     C (two-cpu blocking, opt-in); default $MODES
  --tools LIST       subset of gridperf,sockperf,nptcp,qperf (default all)
  --out FILE         raw + parsed results as JSON (default WORKDIR/results.json)
  --workdir DIR      where logs go (default: a new /tmp/rtt-peers.XXXXXX)
  --gridperf PATH    gridperf binary (default \$GRIDPERF or target/release/gridperf;
                     built with 'cargo build --release -p gridperf' if missing)
  --no-build         do not build gridperf; fail if it is missing
  --port-base P      first of the 4 loopback ports used (default $PORT_BASE)
  --quiet-wait S     before each run, wait up to S seconds (default $QUIET_WAIT) until
                     no CPU is more than $QUIET_PCT% busy (other programs, e.g. a
                     compiler, skew every figure); 0 disables the wait
  --order O          size (default): all tools at one size, then the next size, so
                     that the machine's drift hits the tools alike; tool: each tool
                     through all sizes, then the next tool (fewer server restarts)
  --markdown         print the tables as Markdown
  -h, --help         this help

Re-render tables from an existing work directory without re-running:
  python3 bench/compare.py WORKDIR [--out FILE] [--markdown]
EOF
}

BENCH=rtt-peers
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"

while [ $# -gt 0 ]; do
    case "$1" in
        --seconds)    DUR=${2:?}; shift 2 ;;
        --iterations) ITER=${2:?}; shift 2 ;;
        --repeat)     ROUNDS=${2:?}; shift 2 ;;
        --sizes)      SIZES=${2:?}; shift 2 ;;
        --modes)      MODES=${2:?}; shift 2 ;;
        --tools)      TOOLS=${2:?}; shift 2 ;;
        --out)        OUT=${2:?}; shift 2 ;;
        --workdir)    WORKDIR=${2:?}; shift 2 ;;
        --gridperf)   GRIDPERF=${2:?}; shift 2 ;;
        --no-build)   NO_BUILD=1; shift ;;
        --port-base)  PORT_BASE=${2:?}; shift 2 ;;
        --quiet-wait) QUIET_WAIT=${2:?}; shift 2 ;;
        --markdown)   MARKDOWN=1; shift ;;
        --order)      ORDER=${2:?}; shift 2 ;;
        -h|--help)    usage; exit 0 ;;
        *) usage >&2; die "unknown option: $1" ;;
    esac
done

# ---------------------------------------------------------------- validation
[ "$ORDER" = size ] || [ "$ORDER" = tool ] || die "--order takes size or tool"
[[ $DUR =~ ^[0-9]+$ ]] && [ "$DUR" -ge 1 ] && [ "$DUR" -le 600 ] ||
    die "--seconds must be an integer 1..600 (sockperf and qperf take whole seconds)"
[ -z "$ITER" ] || { [[ $ITER =~ ^[0-9]+$ ]] && [ "$ITER" -ge 1 ]; } || die "--iterations must be a positive integer"
[[ $QUIET_WAIT =~ ^[0-9]+$ ]] || die "--quiet-wait must be a non-negative integer"
[[ $ROUNDS =~ ^[0-9]+$ ]] && [ "$ROUNDS" -ge 1 ] && [ "$ROUNDS" -le 100 ] || die "--repeat must be 1..100"
[[ $PORT_BASE =~ ^[0-9]+$ ]] && [ "$PORT_BASE" -ge 1024 ] && [ "$PORT_BASE" -le 65000 ] ||
    die "--port-base must be 1024..65000"
IFS=, read -r -a SIZE_LIST <<<"$SIZES"
ALL_SIZES=("${SIZE_LIST[@]}")
for s in "${SIZE_LIST[@]}"; do
    [[ $s =~ ^[0-9]+$ ]] && [ "$s" -ge 1 ] && [ "$s" -le 1048576 ] || die "bad size '$s' (1..1048576)"
done
IFS=, read -r -a MODE_LIST <<<"$MODES"
for m in "${MODE_LIST[@]}"; do [[ $m =~ ^[ABC]$ ]] || die "bad mode '$m' (A, B or C)"; done
IFS=, read -r -a TOOL_LIST <<<"$TOOLS"
declare -A USE=()
for t in "${TOOL_LIST[@]}"; do
    case "$t" in gridperf|sockperf|nptcp|qperf) USE[$t]=1 ;; *) die "bad tool '$t'" ;; esac
done

for b in taskset timeout python3 ss; do
    command -v "$b" >/dev/null 2>&1 || die "'$b' is required"
done
declare -A PEER_BIN=([sockperf]=sockperf [nptcp]=NPtcp [qperf]=qperf)
for t in sockperf nptcp qperf; do
    if [ -n "${USE[$t]:-}" ] && ! command -v "${PEER_BIN[$t]}" >/dev/null 2>&1; then
        die "${PEER_BIN[$t]} not found; run bench/install-peers.sh (or drop it with --tools)"
    fi
done

NCPU=$(nproc)
if [ "$NCPU" -lt 2 ]; then
    for m in "${MODE_LIST[@]}"; do
        [ "$m" = A ] || die "mode $m needs two CPUs; this machine has $NCPU (use --modes A)"
    done
fi

[ -z "${USE[gridperf]:-}" ] || build_gridperf sockperf,nptcp,qperf
SP_TCP_PORT=$PORT_BASE
SP_UDP_PORT=$((PORT_BASE + 1))
QP_PORT=$((PORT_BASE + 2))
NP_PORT=$((PORT_BASE + 3))
for p in $SP_TCP_PORT $SP_UDP_PORT $QP_PORT $NP_PORT; do
    if [ -n "$(ss -Hlntu "( sport = :$p )" 2>/dev/null)" ]; then
        die "port $p is in use; choose other ports with --port-base"
    fi
done

setup_workdir
run_header "$WORKDIR/run.md"
# Run from the work directory, so that nothing a tool writes lands elsewhere.
cd "$WORKDIR"

# ------------------------------------------------------------ process control
SERVER_PIDS=()

# stop_pid PID: TERM the process we started (a timeout(1) wrapper, which
# forwards the signal to its child), then KILL it and its direct children if
# they are still there after 3 s.
stop_pid() {
    local pid=$1 kids i
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    kids=$(pgrep -P "$pid" 2>/dev/null || true)
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 30); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        for k in $kids; do kill -KILL "$k" 2>/dev/null || true; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

cleanup() {
    local rc=$?
    for pid in "${SERVER_PIDS[@]}"; do stop_pid "$pid"; done
    SERVER_PIDS=()
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_server NAME CPU BUDGET_S PROTO PORT -- CMD...: sets SERVER_PID.
start_server() {
    local name=$1 cpu=$2 budget=$3 proto=$4 port=$5
    shift 6
    local logf=$WORKDIR/$name.server.log
    echo "# cpu=$cpu: $*" >"$logf"
    timeout -k 2 "$budget" taskset -c "$cpu" "$@" >>"$logf" 2>&1 &
    SERVER_PID=$!
    SERVER_PIDS+=("$SERVER_PID")
    if ! wait_listen "$proto" "$port" "$SERVER_PID"; then
        warn "server $name did not come up on port $port; see $logf"
        stop_server "$SERVER_PID"
        return 1
    fi
}

stop_server() {
    local pid=$1 p keep=()
    stop_pid "$pid"
    for p in "${SERVER_PIDS[@]}"; do [ "$p" = "$pid" ] || keep+=("$p"); done
    SERVER_PIDS=("${keep[@]}")
}

# record MODE TOOL PROTO SIZE WIRE RC LOG EXTRA CMD
# (appended: round, CPU busy before the run, % of CPU time the hypervisor stole during it)
record() {
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" "$ROUND" "$BUSY_BEFORE" "$STEAL_PCT" >>"$MANIFEST"
}
BUSY_BEFORE=""
STEAL_PCT=""
STEAL0=""

# Steal time (field 8 of the "cpu" line of /proc/stat): CPU time the host gave
# to someone else while our vCPUs wanted to run. steal_start before a run,
# steal_stop after it sets STEAL_PCT.
steal_start() { STEAL0=$(awk '/^cpu /{t=0; for(i=2;i<=NF;i++) t+=$i; print t, $9; exit}' /proc/stat); }
steal_stop() {
    local now
    now=$(awk '/^cpu /{t=0; for(i=2;i<=NF;i++) t+=$i; print t, $9; exit}' /proc/stat)
    STEAL_PCT=$(echo "$STEAL0 $now" | awk '{dt = $3 - $1; pct = 0; if (dt > 0) pct = 100 * ($4 - $2) / dt; printf "%.1f", pct}')
}

# run_client MODE TOOL PROTO SIZE WIRE CPU TIMEOUT_S LOG EXTRA -- CMD...
run_client() {
    local mode=$1 tool=$2 proto=$3 size=$4 wire=$5 cpu=$6 to=$7 logf=$8 extra=$9 rc
    shift 10
    quiet
    echo "# cpu=$cpu: $*" >"$logf"
    steal_start
    if [ "$cpu" = - ]; then
        timeout -k 5 "$to" "$@" >>"$logf" 2>&1 && rc=0 || rc=$?
    else
        timeout -k 5 "$to" taskset -c "$cpu" "$@" >>"$logf" 2>&1 && rc=0 || rc=$?
    fi
    steal_stop
    if [ "$rc" = 124 ]; then warn "$tool $proto $wire B timed out after ${to}s"
    elif [ "$rc" != 0 ]; then warn "$tool $proto $wire B exited $rc; see $logf"; fi
    record "$mode" "$tool" "$proto" "$size" "$wire" "$rc" "$logf" "$extra" "$([ "$cpu" = - ] || echo "taskset -c $cpu ")$*"
    return 0
}

# ------------------------------------------------------------------- meta
meta schema_run "rtt-peers/1"
meta started_unix "$(date +%s)"
meta host "$(uname -n)"
meta kernel "$(uname -r)"
meta cpus "$NCPU"
meta cpu_model "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
meta lo_mtu "$(cat /sys/class/net/lo/mtu 2>/dev/null || echo '?')"
meta seconds "$DUR"
meta quiet_wait_s "$QUIET_WAIT"
meta quiet_pct "$QUIET_PCT"
meta iterations "${ITER:-time ${DUR}s}"
meta rounds "$ROUNDS"
meta sizes "$SIZES"
meta modes "$MODES"
meta tools "$TOOLS"
meta host_addr "$HOST"
for p in sockperf netpipe-tcp qperf; do
    meta "version_$p" "$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || echo '?')"
done
for s in net.core.busy_read net.core.busy_poll net.ipv4.tcp_autocorking; do
    meta "sysctl_$s" "$(sysctl -n "$s" 2>/dev/null || echo '?')"
done
if [ -n "${USE[gridperf]:-}" ]; then
    meta gridperf "$GRIDPERF"
    meta gridperf_version "$("$GRIDPERF" --version 2>/dev/null | head -1 || echo '?')"
fi

# ------------------------------------------------------------ tool drivers

sizes_for() { # PROTO -> "row:wire" pairs
    local proto=$1 s
    for s in "${SIZE_LIST[@]}"; do
        if [ "$proto" = udp ] && [ "$s" -gt "$UDP_MAX" ]; then
            echo "$UDP_MAX:$UDP_MAX"
        else
            echo "$s:$s"
        fi
    done | awk '!seen[$0]++'
}

run_gridperf() { # MODE PROTO
    local mode=$1 proto=$2 wires=() pair cpu busy=() to logf
    for pair in $(sizes_for "$proto"); do wires+=("${pair#*:}"); done
    case $mode in
        A) cpu=0 ;;
        B) cpu=0,1; busy=(--busy-poll) ;;
        C) cpu=0,1 ;;
    esac
    # Budget: 2 ms per round trip is far above anything seen on loopback.
    local count=()
    if [ -n "$ITER" ]; then count=(--iterations "$ITER"); to=$((60 + ITER * ${#wires[@]} / 500)); else count=(-t "${DUR}s"); to=$((60 + (DUR + 2) * ${#wires[@]})); fi
    logf=$WORKDIR/$mode.r$ROUND.gridperf.$proto.$(IFS=_; echo "${wires[*]}").json
    local sizes_csv
    sizes_csv=$(IFS=,; echo "${wires[*]}")
    log "mode $mode: gridperf $proto sizes $sizes_csv"
    # gridperf pins its own ends (--cpu), so no taskset; stdout is the JSON.
    local rc
    quiet
    echo "$GRIDPERF rtt --proto $proto --sizes $sizes_csv --cpu $cpu ${busy[*]} ${count[*]} --json" >"$logf.cmd"
    steal_start
    timeout -k 5 "$to" "$GRIDPERF" rtt --proto "$proto" --sizes "$sizes_csv" --cpu "$cpu" "${busy[@]}" \
        "${count[@]}" --json >"$logf" 2>"$logf.stderr" && rc=0 || rc=$?
    steal_stop
    if [ "$rc" != 0 ]; then warn "gridperf $proto exited $rc; see $logf.stderr"; fi
    for pair in $(sizes_for "$proto"); do
        record "$mode" gridperf "$proto" "${pair%%:*}" "${pair#*:}" "$rc" "$logf" "" "$(cat "$logf.cmd")"
    done
}

run_sockperf() { # MODE PROTO SCPU CCPU BUSY
    local mode=$1 proto=$2 scpu=$3 ccpu=$4 busy=$5 pfl=() nb=() port pair size wire n=0
    [ "$proto" = tcp ] && { pfl=(--tcp); port=$SP_TCP_PORT; } || port=$SP_UDP_PORT
    [ "$busy" = 1 ] && nb=(--nonblocked)
    for pair in $(sizes_for "$proto"); do n=$((n + 1)); done
    # sockperf pp runs about S + 2.5 s (warm-up, start-up and tear-down).
    start_server "$mode.r$ROUND.sockperf.$proto" "$scpu" $((n * (DUR + 30 + QUIET_WAIT) + 30)) "$proto" "$port" -- \
        sockperf sr "${pfl[@]}" -i "$HOST" -p "$port" "${nb[@]}" || {
        for pair in $(sizes_for "$proto"); do
            record "$mode" sockperf "$proto" "${pair%%:*}" "${pair#*:}" 255 "" "server failed" "sockperf sr"
        done
        return 0
    }
    local spid=$SERVER_PID
    # A --nonblocked server spins on its CPU: do not wait for that CPU to go idle.
    [ "$busy" = 1 ] && QUIET_SKIP=$scpu
    for pair in $(sizes_for "$proto"); do
        size=${pair%%:*}; wire=${pair#*:}
        if [ "$wire" -lt "$SOCKPERF_MIN" ]; then
            BUSY_BEFORE=""; STEAL_PCT=""
            record "$mode" sockperf "$proto" "$size" "$wire" - "" "n/a: sockperf -m minimum is $SOCKPERF_MIN" ""
            continue
        fi
        [ "$wire" -gt "$SOCKPERF_MAX" ] && wire=$SOCKPERF_MAX
        log "mode $mode: sockperf $proto $wire B"
        run_client "$mode" sockperf "$proto" "$size" "$wire" "$ccpu" $((DUR + 30)) \
            "$WORKDIR/$mode.r$ROUND.sockperf.$proto.$size.log" "" -- \
            sockperf pp "${pfl[@]}" -i "$HOST" -p "$port" -m "$wire" -t "$DUR" --full-rtt "${nb[@]}"
    done
    QUIET_SKIP=""
    stop_server "$spid"
}

run_qperf() { # MODE PROTO SCPU CCPU
    local mode=$1 proto=$2 scpu=$3 ccpu=$4 test pair size wire n=0
    test=${proto}_lat
    for pair in $(sizes_for "$proto"); do n=$((n + 1)); done
    start_server "$mode.r$ROUND.qperf.$proto" "$scpu" $((n * (DUR + 30 + QUIET_WAIT) + 30)) tcp "$QP_PORT" -- \
        qperf -lp "$QP_PORT" || {
        for pair in $(sizes_for "$proto"); do
            record "$mode" qperf "$proto" "${pair%%:*}" "${pair#*:}" 255 "" "server failed" "qperf"
        done
        return 0
    }
    local spid=$SERVER_PID
    for pair in $(sizes_for "$proto"); do
        size=${pair%%:*}; wire=${pair#*:}
        log "mode $mode: qperf $test $wire B"
        # -uu: one unit (ns), -e 6: six significant digits, -vs: also msg_rate.
        run_client "$mode" qperf "$proto" "$size" "$wire" "$ccpu" $((DUR + 30)) \
            "$WORKDIR/$mode.r$ROUND.qperf.$proto.$wire.log" "" -- \
            qperf "$HOST" -lp "$QP_PORT" -t "$DUR" -m "$wire" -uu -e 6 -vs "$test"
    done
    stop_server "$spid"
}

# np_once MODE WIRE SCPU CCPU NREPEAT(or 0) LOG OUTFILE -> rc in NP_RC
np_once() {
    local mode=$1 wire=$2 scpu=$3 ccpu=$4 nrep=$5 logf=$6 outf=$7 nfl=() to
    [ "$nrep" -gt 0 ] && nfl=(-n "$nrep")
    to=$((2 * DUR + 60))
    local args=(-P "$NP_PORT" -l "$wire" -u "$wire" -p 0 "${nfl[@]}")
    start_server "$mode.r$ROUND.nptcp.$wire$([ "$nrep" -gt 0 ] || echo .calib)" "$scpu" "$((to + QUIET_WAIT + 10))" tcp "$NP_PORT" -- \
        NPtcp "${args[@]}" || { NP_RC=255; return 0; }
    local spid=$SERVER_PID
    rm -f "$outf"
    quiet
    echo "# cpu=$ccpu: NPtcp -h $HOST ${args[*]} -o $outf" >"$logf"
    steal_start
    timeout -k 5 "$to" taskset -c "$ccpu" NPtcp -h "$HOST" "${args[@]}" -o "$outf" >>"$logf" 2>&1 &&
        NP_RC=0 || NP_RC=$?
    steal_stop
    stop_server "$spid"
}

run_nptcp() { # MODE SCPU CCPU
    local mode=$1 scpu=$2 ccpu=$3 pair size wire nrep t
    for pair in $(sizes_for tcp); do
        size=${pair%%:*}; wire=${pair#*:}
        log "mode $mode: NPtcp $wire B"
        # Calibrate: one run with NetPIPE's own repeat count gives the one-way
        # time t; then pick -n so that the 3 timed trials take about S seconds.
        np_once "$mode" "$wire" "$scpu" "$ccpu" 0 \
            "$WORKDIR/$mode.r$ROUND.nptcp.$wire.calib.log" "$WORKDIR/$mode.r$ROUND.nptcp.$wire.calib.out"
        nrep=0
        if [ "$NP_RC" = 0 ]; then
            t=$(awk 'NF == 3 { t = $3 } END { print t + 0 }' "$WORKDIR/$mode.r$ROUND.nptcp.$wire.calib.out" 2>/dev/null || echo 0)
            nrep=$(python3 -c "t=float('$t'); print(max(100, min(50000000, int($DUR / ($NP_TRIALS * 2 * t))) if t > 0 else 0))")
        fi
        [ "$nrep" -gt 0 ] || warn "NPtcp calibration at $wire B failed; using NetPIPE's own repeat count"
        local logf=$WORKDIR/$mode.r$ROUND.nptcp.$wire.log outf=$WORKDIR/$mode.r$ROUND.nptcp.$wire.out
        np_once "$mode" "$wire" "$scpu" "$ccpu" "$nrep" "$logf" "$outf"
        record "$mode" nptcp tcp "$size" "$wire" "$NP_RC" "$logf" "$outf" \
            "taskset -c $ccpu NPtcp -h $HOST -P $NP_PORT -l $wire -u $wire -p 0 $([ "$nrep" -gt 0 ] && echo "-n $nrep") -o $outf"
    done
}

# ------------------------------------------------------------------- run
ROUND=0
for ROUND in $(seq "$ROUNDS"); do
    if [ "$ROUNDS" -gt 1 ]; then log "round $ROUND of $ROUNDS"; fi
    for mode in "${MODE_LIST[@]}"; do
        case $mode in
            A) SCPU=0; CCPU=0; BUSY=0 ;;
            B) SCPU=1; CCPU=0; BUSY=1 ;;
            C) SCPU=1; CCPU=0; BUSY=0 ;;
        esac
        meta "mode_${mode}_r${ROUND}_loadavg_before" "$(cut -d' ' -f1-3 /proc/loadavg)"
        # --order size runs every tool at one size before the next size
        if [ "$ORDER" = size ]; then GROUPS_OF_SIZES=("${ALL_SIZES[@]}"); else GROUPS_OF_SIZES=("$(IFS=,; echo "${ALL_SIZES[*]}")"); fi
        for group in "${GROUPS_OF_SIZES[@]}"; do
            IFS=, read -r -a SIZE_LIST <<<"$group"
            for proto in tcp udp; do
                if [ -n "${USE[sockperf]:-}" ]; then run_sockperf "$mode" "$proto" "$SCPU" "$CCPU" "$BUSY"; fi
                # qperf and NetPIPE have no busy-poll mode for sockets: not in mode B.
                if [ "$BUSY" = 0 ] && [ -n "${USE[qperf]:-}" ]; then run_qperf "$mode" "$proto" "$SCPU" "$CCPU"; fi
                if [ "$BUSY" = 0 ] && [ -n "${USE[nptcp]:-}" ] && [ "$proto" = tcp ]; then run_nptcp "$mode" "$SCPU" "$CCPU"; fi
                if [ -n "${USE[gridperf]:-}" ]; then run_gridperf "$mode" "$proto"; fi
            done
        done
    done
done
meta finished_unix "$(date +%s)"

pyargs=("$WORKDIR" --out "$OUT")
[ "$MARKDOWN" = 1 ] && pyargs+=(--markdown)
crc=0
python3 "$HERE/compare.py" "${pyargs[@]}" || crc=$?
log "raw logs: $WORKDIR; results: $OUT"
# compare.py exits 2 when some run gave no figure (the table says which).
exit "$crc"
