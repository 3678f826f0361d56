#!/usr/bin/env bash
# bench/trace-peers.sh: gridperf trace next to tcptrace and tshark (issue
# 19), in one run, on captures whose ground truth is known.
#
# 1. Captures made here: `gridperf stream --capture` across the lab (raw-IP
#    pcap at the sender, TCP_INFO beside it): the man profile at 20 ms with
#    1% loss (10 s), and cern-icepp with -w 32M (20 s, the CERN-Tokyo
#    window figure); the first converted to pcapng (editcap); and an IPv6
#    transfer on loopback captured by dumpcap as pcapng. For each: the
#    bulk direction's bytes, retransmissions, RTT and throughput by
#    gridperf trace, tcptrace -l and tshark (-z conv,tcp; its expert info
#    for retransmissions), with TCP_INFO's where the capture came from
#    stream --capture. A tool that cannot read a file says so.
# 2. Reading speed: the man capture concatenated with itself (mergecap -a,
#    doubling) until it holds FRAMES frames or more, read by each tool;
#    frames per second and the largest resident memory, ROUNDS rounds (the
#    median). The copies repeat the connection's ports and times: each
#    reads as a new connection, and time steps back between them.
#
#   bench/trace-peers.sh [--frames 8000000] [--rounds 3] [--gridperf PATH] [--out DIR]
#
# Needs root (dumpcap on lo, net.core.rmem_max for -w 32M, put back after)
# and tcptrace, tshark (bench/install-peers.sh installs them).
BENCH_ARGS="$*" # the command line, for run_header (bench/lib.sh)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
GRIDPERF=$REPO/target/release/gridperf
FRAMES=8000000
ROUNDS=3
OUT=$REPO/bench/results/trace-peers-$(date +%Y%m%d-%H%M%S)
while [ $# -gt 0 ]; do
    case "$1" in
        --frames) FRAMES=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --gridperf) GRIDPERF=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        *) echo "trace-peers: unknown argument $1" >&2; exit 2 ;;
    esac
done
BENCH=trace-peers
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"
[ "$(id -u)" -eq 0 ] || die "needs root (dumpcap on lo, net.core.rmem_max)"
for t in tcptrace tshark editcap mergecap dumpcap; do
    command -v "$t" >/dev/null || die "needs $t: apt-get install tcptrace tshark"
done
[ -x "$GRIDPERF" ] || (cd "$REPO" && cargo build --release -p gridperf)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
run_header "$OUT/run.md"
WORK=$(mktemp -d /dev/shm/gridperf-trace-peers.XXXXXX)
old_r=$(sysctl -n net.core.rmem_max)
old_w=$(sysctl -n net.core.wmem_max)
PIDS=()
cleanup() {
    stop_started
    sysctl -qw net.core.rmem_max="$old_r" net.core.wmem_max="$old_w"
    rm -rf "$WORK"
}
trap cleanup EXIT

log "captures: man 20 ms 1% loss, cern-icepp -w 32M, IPv6 on loopback"
"$GRIDPERF" stream --lab man --lab-set rtt=20ms --lab-set loss=1% -t 10 -C cubic --capture "$WORK/man.pcap" \
    --no-store --json >"$OUT/man-stream.json"
sysctl -qw net.core.rmem_max=67108864 net.core.wmem_max=67108864
"$GRIDPERF" stream --lab cern-icepp -w 32M -t 20 -C cubic --capture "$WORK/cern.pcap" --no-store --json \
    >"$OUT/cern-stream.json"
sysctl -qw net.core.rmem_max="$old_r" net.core.wmem_max="$old_w"
editcap -F pcapng "$WORK/man.pcap" "$WORK/man.pcapng"
# IPv6 on loopback, pcapng from dumpcap: 3 s paced at 200 Mbit/s
"$GRIDPERF" serve --bind ::1 --port 5399 2>/dev/null &
PIDS+=($!)
dumpcap -q -i lo -s 128 -f "ip6 and tcp" -w "$WORK/v6.pcapng" 2>/dev/null &
DC=$!
PIDS+=($DC)
sleep 1.5
"$GRIDPERF" stream ::1 -p 5399 -t 3 --pacing 200M -C cubic --no-store --json >"$OUT/v6-stream.json"
sleep 0.5
kill -INT "$DC"
wait "$DC" 2>/dev/null || true
cp "$WORK/cern.pcap" "$OUT/cern.pcap"
# stream --capture's charts of TCP_INFO and the capture together
cp "$WORK"/*.pcap.svg "$OUT/" 2>/dev/null || true
# the CERN-Tokyo figure from the capture: stored, drawn by report
"$GRIDPERF" trace "$WORK/cern.pcap" --db "$WORK/t.db" >"$OUT/cern-trace.txt"
"$GRIDPERF" report 1 --db "$WORK/t.db" -o "$OUT/cern-report.html" --svg-dir "$OUT/cern-plots" >/dev/null

# figures FILE STREAM_JSON: one line of JSON per tool for the file's bulk direction
figures() {
    local f=$1 sj=$2
    "$GRIDPERF" trace "$f" --no-store --json >"$WORK/g.json" 2>/dev/null || echo '{}' >"$WORK/g.json"
    tcptrace -l -r -n "$f" >"$WORK/t.txt" 2>&1 || true
    tshark -r "$f" -q -z conv,tcp >"$WORK/s.txt" 2>&1 || true
    tshark -r "$f" -Y "tcp.analysis.retransmission or tcp.analysis.fast_retransmission" -T fields -e tcp.stream \
        >"$WORK/sr.txt" 2>/dev/null || true
    python3 "$REPO/bench/trace_compare.py" "$f" "$WORK/g.json" "$WORK/t.txt" "$WORK/s.txt" "$WORK/sr.txt" "$sj"
}
{
    figures "$WORK/man.pcap" "$OUT/man-stream.json"
    figures "$WORK/man.pcapng" "$OUT/man-stream.json"
    figures "$WORK/cern.pcap" "$OUT/cern-stream.json"
    figures "$WORK/v6.pcapng" "$OUT/v6-stream.json"
} | tee "$OUT/agreement.jsonl" | python3 "$REPO/bench/trace_compare.py" --table | tee "$OUT/agreement.txt"

log "reading speed: the man capture doubled until it holds $FRAMES frames"
cp "$WORK/man.pcap" "$WORK/big.pcap"
frames=$(capinfos -c -M "$WORK/big.pcap" | awk '/Number of packets/ {print $NF}')
while [ "$frames" -lt "$FRAMES" ]; do
    mergecap -a -F pcap -w "$WORK/big2.pcap" "$WORK/big.pcap" "$WORK/big.pcap"
    mv "$WORK/big2.pcap" "$WORK/big.pcap"
    frames=$((frames * 2))
done
frames=$(capinfos -c -M "$WORK/big.pcap" | awk '/Number of packets/ {print $NF}')
size=$(stat -c %s "$WORK/big.pcap")
: >"$OUT/speed.tsv"
for r in $(seq "$ROUNDS"); do
    for tool in gridperf tcptrace tshark; do
        case $tool in
            gridperf) cmd=("$GRIDPERF" trace "$WORK/big.pcap" --no-store --json) ;;
            tcptrace) cmd=(tcptrace -l -n -r "$WORK/big.pcap") ;;
            tshark) cmd=(tshark -r "$WORK/big.pcap" -q -z conv,tcp) ;;
        esac
        /usr/bin/time -f "%e %M" -o "$WORK/time.txt" "${cmd[@]}" >/dev/null 2>&1 || true
        read -r secs kb <"$WORK/time.txt"
        printf '%s\t%s\t%s\t%s\n' "$tool" "$r" "$secs" "$kb" >>"$OUT/speed.tsv"
        log "round $r $tool: $secs s, $kb KiB resident"
    done
done
python3 - "$OUT/speed.tsv" "$frames" "$size" <<'EOF' | tee "$OUT/speed.txt"
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]) if l.strip()]
frames, size = int(sys.argv[2]), int(sys.argv[3])
print(f"reading {frames} frames ({size / 1e6:.0f} MB, pcap), median of {len(rows) // 3} rounds")
print(f"{'tool':<10} {'seconds':>8} {'frames/s':>12} {'max RSS':>10}")
best = {}
for tool in ("gridperf", "tcptrace", "tshark"):
    s = [float(r[2]) for r in rows if r[0] == tool]
    k = [int(r[3]) for r in rows if r[0] == tool]
    m = statistics.median(s)
    best[tool] = m
    print(f"{tool:<10} {m:>8.2f} {frames / m:>12.0f} {max(k) / 1024:>8.0f} MB")
print(f"gridperf / tcptrace: {best['tcptrace'] / best['gridperf']:.2f}x the rate; "
      f"gridperf / tshark: {best['tshark'] / best['gridperf']:.2f}x")
EOF
log "results in $OUT"
