#!/usr/bin/env bash
# tune-baltic.sh: BalticGrid-II's finding (seed 003) in the lab. Hosts with
# an old kernel's TCP buffers on a gigabit path at 8, 20 and 35 ms RTT: one
# TCP stream before and after `gridperf tune --in-lab --apply`, and the
# factor gained; then the same path with this kernel's own defaults, where
# tune should say the buffers suffice.
#
# The old buffers are Linux 2.6.9's (Scientific Linux 4) defaults, set per
# namespace with `lab up --sysctl`: tcp_rmem 4096 87380 174760 and tcp_wmem
# 4096 16384 131072. net.core.rmem_max/wmem_max are global (not per
# namespace) and stay as they are; an autotuned stream does not read them.
#
# Usage: sudo bash bench/tune-baltic.sh [--seconds N] [--omit N] [--cc NAME] [--rtts 8ms,20ms,35ms]
# Needs root (the lab). All traffic stays inside the lab's namespaces.
BENCH_ARGS="$*" # the command line, for run_header (bench/lib.sh)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
SECS=10
OMIT=3
CC=cubic
RTTS=8ms,20ms,35ms
NAME=tunebench
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) SECS=$2; shift 2 ;;
        --omit) OMIT=$2; shift 2 ;;
        --cc) CC=$2; shift 2 ;;
        --rtts) RTTS=$2; shift 2 ;;
        -h|--help) sed -n 2,15p "$0"; exit 0 ;;
        *) echo "tune-baltic.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "tune-baltic.sh: needs root, for the lab's namespaces" >&2; exit 2; }

cargo build --release --locked -q --manifest-path "$REPO/Cargo.toml" -p gridperf
G="$REPO/target/release/gridperf"
OUT="$REPO/bench/results/tune-baltic-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$OUT"
BENCH=${BENCH:-tune-baltic}
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"
run_header "$OUT/run.md"
SERVER=""
cleanup() {
    [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null || true
    "$G" lab down --name "$NAME" >/dev/null 2>&1 || true
}
trap cleanup EXIT

# one stream from a to b; a fresh agent on b each time, stopped by its PID.
# A run the emulator marks INVALID (exit 4: it fell behind on this 2-vCPU
# machine) is run again, up to 3 times; each attempt's output is kept.
stream() {
    local attempt rc
    for attempt in 1 2 3; do
        "$G" lab exec --name "$NAME" b -- timeout $((SECS + OMIT + 30)) "$G" serve --once >"$OUT/serve-$1.log" 2>&1 &
        SERVER=$!
        sleep 0.5
        rc=0
        timeout $((SECS + OMIT + 30)) "$G" lab exec --name "$NAME" a -- "$G" stream 10.77.2.1 -t "$SECS" --omit "$OMIT" \
            -C "$CC" --expect 1G --json --no-store >"$OUT/stream-$1.json" 2>"$OUT/stream-$1.attempt$attempt.err" || rc=$?
        wait "$SERVER" || true
        SERVER=""
        [ "$rc" = 0 ] && return 0
        echo "   $1: attempt $attempt exited $rc: $(tail -1 "$OUT/stream-$1.attempt$attempt.err")"
        [ "$rc" = 4 ] || return "$rc"
    done
    return 4
}

for rtt in ${RTTS//,/ }; do
    echo "== $rtt, old buffers"
    "$G" lab up --name "$NAME" --profile baltic --set "rtt=$rtt" \
        --sysctl net.ipv4.tcp_rmem="4096 87380 174760" --sysctl net.ipv4.tcp_wmem="4096 16384 131072" >/dev/null
    "$G" tune --in-lab "$NAME" --measure-share -C "$CC" --json >"$OUT/tune-$rtt-before.json"
    stream "$rtt-before"
    "$G" tune --in-lab "$NAME" --measure-share -C "$CC" --apply --json >"$OUT/tune-$rtt-apply.json"
    stream "$rtt-after"
    "$G" lab down --name "$NAME" >/dev/null
done
for rtt in ${RTTS//,/ }; do
    echo "== $rtt, this kernel's defaults"
    "$G" lab up --name "$NAME" --profile baltic --set "rtt=$rtt" >/dev/null
    "$G" tune --in-lab "$NAME" --measure-share -C "$CC" --json >"$OUT/tune-$rtt-default.json"
    stream "$rtt-default"
    "$G" lab down --name "$NAME" >/dev/null
done
python3 "$HERE/tune_summary.py" "$OUT" "$RTTS" | tee "$OUT/summary.md"
