#!/usr/bin/env bash
# stream-peers.sh: side-by-side loopback bulk throughput, `gridperf stream`
# against iperf3, iperf (iperf2) and nuttcp, with the CPU each spends per byte.
#
# Cases (see bench/README.md):
#   tcp1     one TCP stream, each tool's default write size
#   tcp4     four parallel TCP streams (-P 4; nuttcp -N 4)
#   tcp1-zc  one TCP stream, zero-copy sender: gridperf --zerocopy sendfile,
#            gridperf --zerocopy msg (column "gridperf-msg"), iperf3 -Z;
#            iperf2 and nuttcp have no zero-copy mode (n/a)
#   udp1g    one UDP stream at 1 Gbit/s, 1472-byte datagrams
#
# Every run gets a fresh server of its own tool, on a free port, started
# under /usr/bin/time and timeout(1) and stopped by PID when the client is
# done; the client also runs under /usr/bin/time and timeout. CPU = user+sys
# of both processes (and of their threads and waited-for children).
# All traffic goes to 127.0.0.1. Raw logs stay in the work directory; the
# tables come from bench/stream_compare.py.
BENCH_ARGS="$*" # the command line, for run_header (bench/lib.sh)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)

DUR=5                     # --seconds: every client's -t
ROUNDS=3                  # --repeat: whole rounds; every tool once per case per round
CASES=tcp1,tcp4,tcp1-zc,udp1g
TOOLS=gridperf,iperf3,iperf2,nuttcp
OUT=""
WORKDIR=""
PORT_BASE=24100
QUIET_WAIT=30             # --quiet-wait: max seconds to wait for idle CPUs before each run
QUIET_PCT=15
NO_BUILD=0
MARKDOWN=0
GRIDPERF=${GRIDPERF:-$REPO/target/release/gridperf}
HOST=127.0.0.1
UDP_RATE=1G               # udp1g: per-stream rate, 10^9 bit/s (iperf2 is given 1g: its 'G' is 2^30)
UDP_LEN=1472              # udp1g: datagram payload (a 1500-byte IPv4 packet)
TIME_FMT='%e %U %S'       # /usr/bin/time: elapsed, user, system seconds

usage() {
    cat <<EOF
Usage: bench/stream-peers.sh [options]

  --seconds S        every run's duration, -t S for every tool (integer, default $DUR)
  --repeat N         rounds (default $ROUNDS); each round runs every case, and
                     within a case every tool once, in an order that rotates
                     from round to round; each cell is the median over rounds
  --cases LIST       subset of $CASES
  --tools LIST       subset of gridperf,iperf3,iperf2,nuttcp (default all)
  --out FILE         raw + parsed results as JSON (default WORKDIR/results.json)
  --workdir DIR      where logs go (default: a new /tmp/stream-peers.XXXXXX)
  --gridperf PATH    gridperf binary (default \$GRIDPERF or target/release/gridperf;
                     built with 'cargo build --release -p gridperf' if missing).
                     It is copied into the work directory first, so that a
                     rebuild during the run cannot change it halfway.
  --no-build         do not build gridperf; fail if it is missing
  --port-base P      ports are taken from P..P+399 (default $PORT_BASE)
  --quiet-wait S     before each run wait up to S s (default $QUIET_WAIT) until no CPU
                     is over $QUIET_PCT% busy; 0 disables the wait
  --markdown         print the tables as Markdown
  -h, --help         this help

Re-render the tables of a finished run without re-running:
  python3 bench/stream_compare.py WORKDIR [--out FILE] [--markdown]
EOF
}

BENCH=stream-peers
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"

while [ $# -gt 0 ]; do
    case "$1" in
        --seconds)    DUR=${2:?}; shift 2 ;;
        --repeat)     ROUNDS=${2:?}; shift 2 ;;
        --cases)      CASES=${2:?}; shift 2 ;;
        --tools)      TOOLS=${2:?}; shift 2 ;;
        --out)        OUT=${2:?}; shift 2 ;;
        --workdir)    WORKDIR=${2:?}; shift 2 ;;
        --gridperf)   GRIDPERF=${2:?}; shift 2 ;;
        --no-build)   NO_BUILD=1; shift ;;
        --port-base)  PORT_BASE=${2:?}; shift 2 ;;
        --quiet-wait) QUIET_WAIT=${2:?}; shift 2 ;;
        --markdown)   MARKDOWN=1; shift ;;
        -h|--help)    usage; exit 0 ;;
        *) usage >&2; die "unknown option: $1" ;;
    esac
done

# ---------------------------------------------------------------- validation
[[ $DUR =~ ^[0-9]+$ ]] && [ "$DUR" -ge 1 ] && [ "$DUR" -le 300 ] ||
    die "--seconds must be an integer 1..300 (nuttcp and iperf2 take whole seconds here)"
[[ $ROUNDS =~ ^[0-9]+$ ]] && [ "$ROUNDS" -ge 1 ] && [ "$ROUNDS" -le 50 ] || die "--repeat must be 1..50"
[[ $QUIET_WAIT =~ ^[0-9]+$ ]] || die "--quiet-wait must be a non-negative integer"
[[ $PORT_BASE =~ ^[0-9]+$ ]] && [ "$PORT_BASE" -ge 1024 ] && [ "$PORT_BASE" -le 65000 ] ||
    die "--port-base must be 1024..65000"
IFS=, read -r -a CASE_LIST <<<"$CASES"
for c in "${CASE_LIST[@]}"; do
    case "$c" in tcp1|tcp4|tcp1-zc|udp1g) ;; *) die "bad case '$c'" ;; esac
done
IFS=, read -r -a TOOL_LIST <<<"$TOOLS"
declare -A USE=()
for t in "${TOOL_LIST[@]}"; do
    case "$t" in gridperf|iperf3|iperf2|nuttcp) USE[$t]=1 ;; *) die "bad tool '$t'" ;; esac
done

for b in timeout python3 ss pgrep; do
    command -v "$b" >/dev/null 2>&1 || die "'$b' is required"
done
[ -x /usr/bin/time ] || die "/usr/bin/time (GNU time) is required: apt-get install time"
declare -A PEER_BIN=([iperf3]=iperf3 [iperf2]=iperf [nuttcp]=nuttcp)
for t in iperf3 iperf2 nuttcp; do
    if [ -n "${USE[$t]:-}" ] && ! command -v "${PEER_BIN[$t]}" >/dev/null 2>&1; then
        die "${PEER_BIN[$t]} not found; run bench/install-peers.sh (or drop it with --tools)"
    fi
done

[ -z "${USE[gridperf]:-}" ] || build_gridperf iperf3,iperf2,nuttcp
setup_workdir
run_header "$WORKDIR/run.md"
GRIDPERF_SRC=$GRIDPERF
if [ -n "${USE[gridperf]:-}" ]; then
    cp "$GRIDPERF_SRC" "$WORKDIR/gridperf"
    GRIDPERF=$WORKDIR/gridperf
fi
cd "$WORKDIR"   # nothing a tool writes lands elsewhere

# ------------------------------------------------------------ process control
# A server is started as  ( exec /usr/bin/time -o F timeout BUDGET server ... ) &
# so $! is the time(1) process, its child is timeout(1) and the grandchild the
# server. Stopping signals timeout (which passes the signal on to the server)
# and never time itself, so time always writes the server's CPU figures: a
# process's rusage reaches its parent whether it exited or was killed.
SERVER_PIDS=()

# stop_server TIME_PID GRACE_S: wait up to GRACE_S for the server to exit by
# itself, then TERM it via timeout; KILL the server, then timeout, if needed.
stop_server() {
    local tp=$1 grace=$2 i to kids k keep=() p
    for i in $(seq $((grace * 10))); do
        kill -0 "$tp" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$tp" 2>/dev/null; then
        to=$(pgrep -P "$tp" 2>/dev/null || true)
        for p in $to; do kill -TERM "$p" 2>/dev/null || true; done
        for i in $(seq 30); do
            kill -0 "$tp" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$tp" 2>/dev/null; then
            for p in $to; do
                kids=$(pgrep -P "$p" 2>/dev/null || true)
                for k in $kids; do kill -KILL "$k" 2>/dev/null || true; done
            done
            sleep 0.5
            for p in $to; do kill -KILL "$p" 2>/dev/null || true; done
            sleep 0.5
            kill -0 "$tp" 2>/dev/null && kill -KILL "$tp" 2>/dev/null || true
        fi
    fi
    wait "$tp" 2>/dev/null || true
    for p in "${SERVER_PIDS[@]}"; do [ "$p" = "$tp" ] || keep+=("$p"); done
    SERVER_PIDS=("${keep[@]}")
}

cleanup() {
    local rc=$? p
    for p in "${SERVER_PIDS[@]}"; do stop_server "$p" 0; done
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# free_port N: sets PORT to a port P such that no TCP or UDP socket uses
# P..P+N-1. Ports rotate through PORT_BASE..PORT_BASE+399, so that a run never
# reuses the previous run's port (TIME_WAIT, late datagrams).
PORT_NEXT=0
free_port() {
    local n=$1 tries used p ok i
    used=$(ss -Htuan 2>/dev/null | awk '{ n = split($5, a, ":"); print a[n] }' | sort -u)
    for tries in $(seq 50); do
        p=$((PORT_BASE + PORT_NEXT))
        PORT_NEXT=$(((PORT_NEXT + 8) % 400))
        ok=1
        for i in $(seq 0 $((n - 1))); do
            if grep -qx "$((p + i))" <<<"$used"; then ok=0; break; fi
        done
        if [ "$ok" = 1 ]; then PORT=$p; return 0; fi
    done
    return 1
}

# Steal time: CPU time the hypervisor gave to someone else during the client run.
steal_start() { STEAL0=$(awk '/^cpu /{t=0; for(i=2;i<=NF;i++) t+=$i; print t, $9; exit}' /proc/stat); }
steal_stop() {
    local now
    now=$(awk '/^cpu /{t=0; for(i=2;i<=NF;i++) t+=$i; print t, $9; exit}' /proc/stat)
    STEAL_PCT=$(echo "$STEAL0 $now" | awk '{dt = $3 - $1; pct = 0; if (dt > 0) pct = 100 * ($4 - $2) / dt; printf "%.1f", pct}')
}

# record CASE TOOL RC CLIENT_LOG CLIENT_ERR CLIENT_TIME SERVER_LOG SERVER_TIME PORT NOTE CLIENT_CMD SERVER_CMD
record() {
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
        "$ROUND" "$@" "$BUSY_BEFORE" "$STEAL_PCT" "$(cut -d' ' -f1 /proc/loadavg)" >>"$MANIFEST"
}

# ------------------------------------------------------------ tool commands
# tool_cmds CASE TOOL PORT: sets SRV (server argv), CLI (client argv),
# LISTEN (tcp|udp: what the server binds), GRACE (seconds the server is given
# to exit by itself after the client: servers that stop after one test), NPORTS;
# or NA=reason when the tool has no such mode.
tool_cmds() {
    local case=$1 tool=$2 port=$3 extra=()
    NA=""; LISTEN=tcp; GRACE=10; NPORTS=2
    case "$tool" in
        gridperf|gridperf-msg)
            case $case in
                tcp1) ;;
                tcp4) extra=(-P 4) ;;
                tcp1-zc) [ "$tool" = gridperf ] && extra=(--zerocopy sendfile) || extra=(--zerocopy msg) ;;
                udp1g) extra=(-u -b "$UDP_RATE" -l "$UDP_LEN") ;;
            esac
            SRV=("$GRIDPERF" serve --port "$port" --once)
            CLI=("$GRIDPERF" stream "$HOST" -p "$port" -t "$DUR" --json "${extra[@]}") ;;
        iperf3)
            case $case in
                tcp1) ;;
                tcp4) extra=(-P 4) ;;
                tcp1-zc) extra=(-Z) ;;
                udp1g) extra=(-u -b "$UDP_RATE" -l "$UDP_LEN") ;;
            esac
            SRV=(iperf3 -s -1 -p "$port")
            CLI=(iperf3 -c "$HOST" -p "$port" -t "$DUR" -J "${extra[@]}") ;;
        iperf2)
            # The iperf2 server does not stop after one test: it is stopped (TERM)
            # as soon as it has written its report (IPERF2_LINES CSV lines).
            GRACE=0; IPERF2_LINES=1
            case $case in
                tcp1) SRV=(iperf -s -p "$port" -y C) ;;
                tcp4) SRV=(iperf -s -p "$port" -y C); extra=(-P 4); IPERF2_LINES=4 ;;
                tcp1-zc) NA="iperf2 has no zero-copy send"; return 0 ;;
                # iperf2 reads -b 1G as 2^30 bit/s (1.074 Gbit/s) and -b 1g as 10^9.
                udp1g) SRV=(iperf -s -u -p "$port" -y C); LISTEN=udp
                       extra=(-u -b "${UDP_RATE,,}" -l "$UDP_LEN") ;;
            esac
            CLI=(iperf -c "$HOST" -p "$port" -t "$DUR" -y C "${extra[@]}") ;;
        nuttcp)
            # -P: control port, -p: data port (and the next ones with -N).
            NPORTS=6
            case $case in
                tcp1) ;;
                tcp4) extra=(-N 4) ;;
                tcp1-zc) NA="nuttcp has no zero-copy send"; return 0 ;;
                udp1g) extra=(-u -R 1g -l "$UDP_LEN") ;;
            esac
            SRV=(nuttcp -1 --nofork -P "$port" -p $((port + 1)))
            CLI=(nuttcp -T "$DUR" -fparse -P "$port" -p $((port + 1)) "${extra[@]}" "$HOST") ;;
    esac
}

# run_one CASE TOOL
run_one() {
    local case=$1 tool=$2 base tp rc i
    BUSY_BEFORE=""; STEAL_PCT=""
    tool_cmds "$case" "$tool" 0
    if [ -n "$NA" ]; then
        record "$case" "$tool" - "" "" "" "" "" "" "n/a: $NA" "" ""
        return 0
    fi
    free_port "$NPORTS" || { warn "no free port in $PORT_BASE..$((PORT_BASE + 399))"; record "$case" "$tool" 255 "" "" "" "" "" "" "no free port" "" ""; return 0; }
    tool_cmds "$case" "$tool" "$PORT"
    base=r$ROUND.$case.$tool      # relative to WORKDIR (the cwd): the directory can be moved
    log "round $ROUND: $case $tool (port $PORT)"
    quiet
    echo "${SRV[*]}" >"$base.server.cmd"
    echo "${CLI[*]}" >"$base.client.cmd"
    ( exec /usr/bin/time -o "$base.server.time" -f "$TIME_FMT" \
        timeout -k 2 $((DUR + 55)) "${SRV[@]}" >"$base.server.log" 2>&1 ) &
    tp=$!
    SERVER_PIDS+=("$tp")
    if ! wait_listen "$LISTEN" "$PORT" "$tp"; then
        warn "$tool server did not come up on port $PORT; see $base.server.log"
        stop_server "$tp" 0
        record "$case" "$tool" 255 "" "" "" "$base.server.log" "$base.server.time" "$PORT" "server failed" "${CLI[*]}" "${SRV[*]}"
        return 0
    fi
    steal_start
    /usr/bin/time -o "$base.client.time" -f "$TIME_FMT" \
        timeout -k 5 $((DUR + 45)) "${CLI[@]}" >"$base.client.log" 2>"$base.client.err" && rc=0 || rc=$?
    steal_stop
    if [ "$tool" = iperf2 ]; then   # let iperf2's server write its report (up to 5 s)
        for i in $(seq 50); do
            [ "$(grep -cE '^[0-9]{14},' "$base.server.log" 2>/dev/null || true)" -ge "$IPERF2_LINES" ] && break
            sleep 0.1
        done
        sleep 0.2
    fi
    stop_server "$tp" "$GRACE"
    if [ "$rc" = 124 ]; then warn "$case $tool timed out"
    elif [ "$rc" != 0 ]; then warn "$case $tool client exited $rc; see $base.client.err"; fi
    record "$case" "$tool" "$rc" "$base.client.log" "$base.client.err" "$base.client.time" \
        "$base.server.log" "$base.server.time" "$PORT" "" "${CLI[*]}" "${SRV[*]}"
}

tools_for() { # CASE -> tool ids, in the base order
    local t
    for t in gridperf iperf3 iperf2 nuttcp; do
        [ -n "${USE[$t]:-}" ] || continue
        echo "$t"
        if [ "$t" = gridperf ] && [ "$1" = tcp1-zc ]; then echo gridperf-msg; fi
    done
}

# ------------------------------------------------------------------- meta
meta schema_run "stream-peers/1"
meta started_unix "$(date +%s)"
meta host "$(uname -n)"
meta kernel "$(uname -r)"
meta cpus "$(nproc)"
meta cpu_model "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
meta lo_mtu "$(cat /sys/class/net/lo/mtu 2>/dev/null || echo '?')"
meta seconds "$DUR"
meta rounds "$ROUNDS"
meta cases "$CASES"
meta tools "$TOOLS"
meta host_addr "$HOST"
meta udp_rate "$UDP_RATE"
meta udp_len "$UDP_LEN"
meta quiet_wait_s "$QUIET_WAIT"
meta quiet_pct "$QUIET_PCT"
meta cpu_method "/usr/bin/time -f '$TIME_FMT' around the server (via timeout) and around the client; user+sys of both"
for p in iperf3 iperf nuttcp; do
    meta "version_$p" "$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || echo '?')"
done
for s in net.ipv4.tcp_congestion_control net.core.rmem_max net.core.wmem_max net.core.rmem_default \
         net.ipv4.tcp_rmem net.ipv4.tcp_wmem net.ipv4.tcp_autocorking net.core.optmem_max; do
    meta "sysctl_$s" "$(sysctl -n "$s" 2>/dev/null | tr '\t' ' ' || echo '?')"
done
if [ -n "${USE[gridperf]:-}" ]; then
    meta gridperf "$GRIDPERF_SRC (copied to $GRIDPERF)"
    meta gridperf_version "$("$GRIDPERF" --version 2>/dev/null | head -1 || echo '?')"
    meta gridperf_mtime "$(date -r "$GRIDPERF_SRC" '+%Y-%m-%d %H:%M:%S %z' 2>/dev/null || echo '?')"
    meta gridperf_sha256 "$(sha256sum "$GRIDPERF" | cut -d' ' -f1)"
    meta repo_head "$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?')"
    meta repo_dirty_files "$(git -C "$REPO" status --porcelain 2>/dev/null | wc -l || echo '?')"
fi

# ------------------------------------------------------------------- run
ROUND=0
for ROUND in $(seq "$ROUNDS"); do
    log "round $ROUND of $ROUNDS"
    meta "r${ROUND}_loadavg_before" "$(cut -d' ' -f1-3 /proc/loadavg)"
    for case in "${CASE_LIST[@]}"; do
        mapfile -t T < <(tools_for "$case")
        n=${#T[@]}
        # Rotate the order from round to round: no tool always runs first.
        for i in $(seq 0 $((n - 1))); do
            run_one "$case" "${T[$(((i + ROUND - 1) % n))]}"
        done
    done
done
meta finished_unix "$(date +%s)"
# The copied binary (its sha256 is in meta.tsv) is not needed to re-render.
[ -n "${USE[gridperf]:-}" ] && rm -f "$GRIDPERF"

pyargs=("$WORKDIR" --out "$OUT")
[ "$MARKDOWN" = 1 ] && pyargs+=(--markdown)
crc=0
python3 "$HERE/stream_compare.py" "${pyargs[@]}" || crc=$?
log "raw logs: $WORKDIR; results: $OUT"
exit "$crc"
