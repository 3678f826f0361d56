#!/usr/bin/env bash
# bench/copy-polite.sh: whether restarting slow streams is antisocial
# (issue 18), in one run, across gridperf's lab. A 2x2 dumbbell whose
# bottleneck (RATE, 200 Mbit/s by default, RTT 20 ms) is 4 parallel paths
# with path 2 losing LOSS (3% by default: where restarts act). A competing
# CUBIC flow runs from a2 to b2 (iperf3, one stream, for the whole round,
# from a client port chosen first so that the lab's hash puts it on a good
# path: where a restarted stream may land) while a copy of 8 CUBIC streams
# goes from a1 to b1, with restarts (the default) or --no-restart, ROUNDS
# rounds each, interleaved. Over the copy's time:
# the competitor's rate, and Jain's fairness index over the 9 flows (the
# copy's 8 stream slots, a restarted stream's replacement in its slot, and
# the competitor): 1 is fair, 1/9 one flow taking all.
#
#   bench/copy-polite.sh [--rounds 3] [--size 384M] [--rate 200M] [--loss 3%] [--gridperf PATH] [--out DIR]
#
# Needs root or unprivileged user namespaces (the lab). Every copy is
# checked with cmp.
BENCH_ARGS="$*" # the command line, for run_header (bench/lib.sh)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
GRIDPERF=$REPO/target/release/gridperf
ROUNDS=3
SIZE=384M
RATE=200M
LOSS=3%
OUT=$REPO/bench/results/copy-polite-$(date +%Y%m%d-%H%M%S)
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --size) SIZE=$2; shift 2 ;;
        --rate) RATE=$2; shift 2 ;;
        --loss) LOSS=$2; shift 2 ;;
        --gridperf) GRIDPERF=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        *) echo "copy-polite: unknown argument $1" >&2; exit 2 ;;
    esac
done
BENCH=copy-polite
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"
[ -x "$GRIDPERF" ] || (cd "$REPO" && cargo build --release -p gridperf)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
run_header "$OUT/run.md"
WORK=$(mktemp -d /dev/shm/gridperf-copy-polite.XXXXXX)
LAB=bpolite$$
PIDS=()
cleanup() {
    stop_started
    "$GRIDPERF" lab down --name "$LAB" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/dst"
bytes=$(numfmt --from=iec "$SIZE")
head -c "$bytes" /dev/urandom >"$WORK/f.dat"
command -v iperf3 >/dev/null || die "needs iperf3 (bench/install-peers.sh)"
log "lab $LAB: 2x2, $RATE as 4 paths, path 2 at $LOSS loss, RTT 20 ms; a copy of $SIZE against one CUBIC flow"
"$GRIDPERF" lab up --name "$LAB" --hosts 2x2 --rate "$RATE" --rtt 20ms --paths 4 --path "2:loss=$LOSS" >/dev/null
"$GRIDPERF" lab exec --name "$LAB" b1 -- "$GRIDPERF" serve --root "$WORK/dst" --allow 10.77.0.0/16 \
    2>"$OUT/agent-b1.log" &
PIDS+=($!)
"$GRIDPERF" lab exec --name "$LAB" b2 -- iperf3 -s -p 5201 >"$OUT/iperf3-b2.log" 2>&1 &
PIDS+=($!)
sleep 1

# the path each lab path's counters say carried the most since the last call (1-based)
path_bytes() {
    "$GRIDPERF" lab status --name "$LAB" --json |
        python3 -c "import json,sys; print(' '.join(str(p[0]['arrived_bytes']) for p in json.load(sys.stdin)['health']['paths']))"
}
CPORT=""
for c in $(seq 40001 40024); do
    before=$(path_bytes)
    "$GRIDPERF" lab exec --name "$LAB" a2 -- iperf3 -c 10.77.2.2 -p 5201 --cport "$c" -t 1 -C cubic >/dev/null 2>&1 || continue
    after=$(path_bytes)
    on=$(python3 -c "
import sys
b=[int(x) for x in sys.argv[1].split()]; a=[int(x) for x in sys.argv[2].split()]
d=[y-x for x,y in zip(b,a)]; print(d.index(max(d))+1)" "$before" "$after")
    if [ "$on" != 2 ]; then CPORT=$c; log "the competitor from port $c takes path $on"; break; fi
done
[ -n "$CPORT" ] || die "no client port among 40001-40024 hashed onto a good path"

# round TAG ARGS...: the competitor for 40 s, the copy 3 s into it; prints the figures
round() {
    local tag=$1 t0 t1 comp status=0
    shift
    rm -f "$WORK/dst/f.dat"
    "$GRIDPERF" lab exec --name "$LAB" a2 -- iperf3 -c 10.77.2.2 -p 5201 --cport "$CPORT" -C cubic -t 40 -J \
        >"$OUT/$tag-competitor.json" 2>"$OUT/$tag-competitor.err" &
    comp=$!
    sleep 3
    t0=$(date +%s.%N)
    "$GRIDPERF" lab exec --name "$LAB" a1 -- "$GRIDPERF" copy "$WORK/f.dat" 10.77.2.1:f.dat -P 8 -C cubic \
        --no-store --json "$@" >"$OUT/$tag.json" 2>"$OUT/$tag.err" || status=$?
    t1=$(date +%s.%N)
    wait "$comp" || true
    [ "$status" -eq 0 ] || [ "$status" -eq 4 ] || die "$tag: exit $status: $(tail -n 3 "$OUT/$tag.err")"
    cmp -s "$WORK/f.dat" "$WORK/dst/f.dat" || die "$tag: the copy differs from the source"
    python3 - "$OUT/$tag.json" "$OUT/$tag-competitor.json" "$t0" "$t1" "$status" <<'EOF'
import json, sys
copy = json.load(open(sys.argv[1]))
comp = json.load(open(sys.argv[2]))
secs = copy["seconds"]
# the copy's data began within its command's wall time: its last `seconds` of it
start = float(sys.argv[4]) - secs
comp_start = float(sys.argv[3]) - 3.0
iv = [i["sum"]["bits_per_second"] for i in comp["intervals"]]
lo, hi = start - comp_start, start - comp_start + secs
# the competitor's 1 s intervals over the copy's time, weighted by their overlap
num = sum(b * max(0.0, min(hi, k + 1) - max(lo, k)) for k, b in enumerate(iv))
comp_bps = num / secs
slots = {}
for s in copy["per_stream"]:
    slots[s.get("slot", s["index"])] = slots.get(s.get("slot", s["index"]), 0) + s["bytes"]
flows = [b * 8 / secs for b in slots.values()] + [comp_bps]
jain = sum(flows) ** 2 / (len(flows) * sum(x * x for x in flows))
restarts = sum(1 for e in copy.get("events", []) if e["kind"] == "restart")
invalid = " INVALID" if sys.argv[5] == "4" else ""
print(f"{secs:.2f} {copy['throughput_bps']:.0f} {comp_bps:.0f} {jain:.3f} {restarts}{invalid}")
EOF
}

: >"$OUT/rounds.tsv"
for r in $(seq "$ROUNDS"); do
    for kind in restarts no-restart; do
        args=()
        [ "$kind" = no-restart ] && args=(--no-restart)
        line=$(round "$kind-$r" "${args[@]}")
        log "round $r $kind: seconds copy_bps competitor_bps jain restarts: $line"
        printf '%s\t%s\n' "$kind" "$line" >>"$OUT/rounds.tsv"
    done
done
python3 - "$OUT/rounds.tsv" <<'EOF' | tee "$OUT/summary.txt"
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
print(f"{'copy':<12} {'copy s':>8} {'copy Mbit/s':>12} {'competitor Mbit/s (range)':>28} {'Jain (range)':>20} {'restarts':>9}")
for kind in ("restarts", "no-restart"):
    f = [r[1].split() for r in rows if r[0] == kind]
    secs = [float(x[0]) for x in f]; cb = [float(x[1]) / 1e6 for x in f]
    comp = [float(x[2]) / 1e6 for x in f]; jain = [float(x[3]) for x in f]; rs = [x[4] for x in f]
    m = statistics.median
    print(f"{kind:<12} {m(secs):>8.2f} {m(cb):>12.1f} {m(comp):>10.1f} ({min(comp):.1f}-{max(comp):.1f}){'':>6}"
          f" {m(jain):>8.3f} ({min(jain):.3f}-{max(jain):.3f}) {','.join(rs):>9}")
EOF
log "results in $OUT"
