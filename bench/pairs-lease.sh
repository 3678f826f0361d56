#!/usr/bin/env bash
# bench/pairs-lease.sh: a copy between agents whose client is far from its
# source, in one run: one pair (a -> b) across gridperf's lab (RATE x RTT),
# the client on b, so that each lease the source asks of it takes a round
# trip of the path. With blocks small next to what the path carries in a
# round trip, a source whose leases do not grow waits for blocks: this
# bench shows whether the leases keep the source's pool fed. Optionally
# next to another gridperf (--vs PATH, an older build), one agent pair of
# each in turn, and with the default 4 MiB blocks as the reference.
#
#   bench/pairs-lease.sh [--rate 500M] [--rtt 200ms] [--size 512M] [--block 256K]
#       [--streams 8] [--tries 3] [--vs PATH] [--gridperf PATH] [--out DIR]
#
# Every copy is checked with cmp and judged by the lab's own rule
# (`lab status --since`): its verdict is printed beside it. Needs root or
# unprivileged user namespaces (the lab).
BENCH_ARGS="$*" # the command line, for run_header (bench/lib.sh)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
GRIDPERF=$REPO/target/release/gridperf
VS=
RATE=500M
RTT=200ms
SIZE=512M
BLOCK=256K
STREAMS=8
TRIES=3
OUT=$REPO/bench/results/pairs-lease-$(date +%Y%m%d-%H%M%S)
while [ $# -gt 0 ]; do
    case "$1" in
        --rate) RATE=$2; shift 2 ;;
        --rtt) RTT=$2; shift 2 ;;
        --size) SIZE=$2; shift 2 ;;
        --block) BLOCK=$2; shift 2 ;;
        --streams) STREAMS=$2; shift 2 ;;
        --tries) TRIES=$2; shift 2 ;;
        --vs) VS=$2; shift 2 ;;
        --gridperf) GRIDPERF=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        *) echo "pairs-lease: unknown argument $1" >&2; exit 2 ;;
    esac
done
BENCH=pairs-lease
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"
[ -x "$GRIDPERF" ] || (cd "$REPO" && cargo build --release -p gridperf)
[ -z "$VS" ] || [ -x "$VS" ] || die "--vs $VS: not an executable"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
run_header "$OUT/run.md"
WORK=$(mktemp -d /dev/shm/gridperf-pairs-lease.XXXXXX)
LAB=blease$$
PIDS=()
cleanup() {
    stop_started
    "$GRIDPERF" lab down --name "$LAB" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/src" "$WORK/dst"
head -c "$(numfmt --from=iec "$SIZE")" /dev/urandom >"$WORK/src/f.dat"
log "lab $LAB: 1x1, $RATE x $RTT; the client on b; a file of $SIZE"
"$GRIDPERF" lab up --name "$LAB" --hosts 1x1 --rate "$RATE" --rtt "$RTT" >/dev/null
builds=("this:$GRIDPERF")
[ -n "$VS" ] && builds=("vs:$VS" "${builds[@]}")
echo "| build | block | try | s | Mbit/s | the lab's verdict |" >"$OUT/table.md"
echo "|---|---|---|---|---|---|" >>"$OUT/table.md"
for b in "${builds[@]}"; do
    tag=${b%%:*} bin=${b#*:}
    PIDS=()
    for hr in a:src b:dst; do
        "$GRIDPERF" lab exec --name "$LAB" "${hr%:*}" -- "$bin" serve --root "$WORK/${hr#*:}" \
            --allow 10.77.0.0/16 2>"$OUT/agent-$tag-${hr%:*}.log" &
        PIDS+=($!)
    done
    sleep 1
    for block in "$BLOCK" 4M; do
        # the reference (4 MiB blocks) once, with this build
        [ "$block" = 4M ] && { [ "$tag" = this ] && [ "$BLOCK" != 4M ] || continue; }
        for try in $(seq "$TRIES"); do
            rm -f "$WORK/dst/f.dat"
            "$GRIDPERF" lab status --name "$LAB" --json >"$WORK/before.json"
            status=0
            "$GRIDPERF" lab exec --name "$LAB" b -- "$bin" copy 10.77.1.1:f.dat 10.77.2.1:f.dat -P "$STREAMS" \
                --block "$block" --force --no-store --json >"$OUT/$tag-$block-$try.json" \
                2>"$OUT/$tag-$block-$try.err" || status=$?
            verdict=$("$GRIDPERF" lab status --name "$LAB" --since "$WORK/before.json" 2>&1 | head -1 || true)
            [ "$status" -eq 0 ] || die "$tag $block: exit $status: $(tail -n 3 "$OUT/$tag-$block-$try.err")"
            cmp -s "$WORK/src/f.dat" "$WORK/dst/f.dat" || die "$tag $block: the copy differs from the source"
            python3 - "$OUT/$tag-$block-$try.json" "$tag" "$block" "$try" "$verdict" <<'EOF' | tee -a "$OUT/table.md"
import json, sys
path, tag, block, tr, verdict = sys.argv[1:]
r = json.load(open(path))
print(f"| {tag} | {block} | {tr} | {r['seconds']:.1f} | {r['throughput_bps'] / 1e6:.0f} | {verdict.split(': ', 1)[-1][:100]} |")
EOF
        done
    done
    stop_started
done
log "results in $OUT"
