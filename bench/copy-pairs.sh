#!/usr/bin/env bash
# bench/copy-pairs.sh: two host pairs against one (issue 18), in one run,
# across gridperf's lab: a 2x2 dumbbell (a1, a2 | b1, b2) whose hosts'
# access links (ACCESS, 100 Mbit/s by default) are narrower than the shared
# bottleneck (1 Gbit/s, RTT 20 ms), as the CERN-Tokyo study's PCs were
# narrower than its link. An agent runs on each host: a1 and a2 rooted at
# one source directory, b1 and b2 at one destination directory (the
# storage each side shares). From a1, gridperf copy moves one file:
#
#   one pair:                 a1 -> b1
#   two pairs, different destinations:   a1 -> b1, a2 -> b2
#   two pairs, the same destination:     a1 -> b1, a2 -> b1 (--same-destination)
#
# ROUNDS rounds, interleaved; each copy checked with cmp. Prints the median
# time and rate of each, and the two-pair rates as ratios of one pair's.
#
#   bench/copy-pairs.sh [--rounds 3] [--size 512M] [--access 100M] [--streams 2]
#       [--gridperf PATH] [--out DIR]
#
# Needs root or unprivileged user namespaces (the lab). A copy during which
# the lab's emulator fell behind (INVALID, exit 4) is run again, up to twice.
BENCH_ARGS="$*" # the command line, for run_header (bench/lib.sh)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
GRIDPERF=$REPO/target/release/gridperf
ROUNDS=3
SIZE=512M
ACCESS=100M
STREAMS=2
OUT=$REPO/bench/results/copy-pairs-$(date +%Y%m%d-%H%M%S)
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --size) SIZE=$2; shift 2 ;;
        --access) ACCESS=$2; shift 2 ;;
        --streams) STREAMS=$2; shift 2 ;;
        --gridperf) GRIDPERF=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        *) echo "copy-pairs: unknown argument $1" >&2; exit 2 ;;
    esac
done
BENCH=copy-pairs
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"
[ -x "$GRIDPERF" ] || (cd "$REPO" && cargo build --release -p gridperf)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
run_header "$OUT/run.md"
WORK=$(mktemp -d /dev/shm/gridperf-copy-pairs.XXXXXX)
LAB=bpairs$$
PIDS=()
cleanup() {
    stop_started
    "$GRIDPERF" lab down --name "$LAB" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/src" "$WORK/dst"
bytes=$(numfmt --from=iec "$SIZE")
head -c "$bytes" /dev/urandom >"$WORK/src/f.dat"
log "lab $LAB: 2x2, bottleneck 1G 20 ms, access links $ACCESS; file of $SIZE"
"$GRIDPERF" lab up --name "$LAB" --hosts 2x2 --rate 1G --rtt 20ms --access "rate=$ACCESS" >/dev/null
for hr in a1:src a2:src b1:dst b2:dst; do
    "$GRIDPERF" lab exec --name "$LAB" "${hr%:*}" -- "$GRIDPERF" serve --root "$WORK/${hr#*:}" \
        --allow 10.77.0.0/16 2>"$OUT/agent-${hr%:*}.log" &
    PIDS+=($!)
done
sleep 1

# one TAG SRC DEST ARGS...: one copy from a1, rerun while INVALID; prints "seconds bps"
one() {
    local tag=$1 src=$2 dst=$3 status
    shift 3
    for attempt in 1 2 3; do
        rm -f "$WORK/dst/f.dat"
        status=0
        "$GRIDPERF" lab exec --name "$LAB" a1 -- "$GRIDPERF" copy "$src" "$dst" -P "$STREAMS" --no-store --json "$@" \
            >"$OUT/$tag.json" 2>"$OUT/$tag.err" || status=$?
        [ "$status" -eq 4 ] && [ "$attempt" -lt 3 ] && { log "$tag INVALID, again"; continue; }
        break
    done
    [ "$status" -eq 0 ] || die "$tag: exit $status: $(tail -n 3 "$OUT/$tag.err")"
    cmp -s "$WORK/src/f.dat" "$WORK/dst/f.dat" || die "$tag: the copy differs from the source"
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['seconds'], r['throughput_bps'])" "$OUT/$tag.json"
}

declare -A SECS
for round in $(seq "$ROUNDS"); do
    for kind in one two-different two-same; do
        case $kind in
            one) args=(10.77.1.1:f.dat 10.77.2.1:f.dat) ;;
            two-different) args=(10.77.1.1:f.dat,10.77.1.2:f.dat 10.77.2.1:f.dat,10.77.2.2:f.dat) ;;
            two-same) args=(10.77.1.1:f.dat,10.77.1.2:f.dat 10.77.2.1:f.dat --same-destination) ;;
        esac
        read -r secs bps < <(one "$kind-$round" "${args[@]}")
        log "round $round $kind: $secs s, $bps bit/s"
        SECS[$kind]="${SECS[$kind]:-} $secs"
    done
done
python3 - "$bytes" "${SECS[one]}" "${SECS[two-different]}" "${SECS[two-same]}" <<'EOF' | tee "$OUT/summary.txt"
import statistics, sys
size = int(sys.argv[1])
rows = [("one pair (a1 -> b1)", sys.argv[2]), ("two pairs, different destinations", sys.argv[3]),
        ("two pairs, the same destination", sys.argv[4])]
med = {}
print(f"{'copy':<36} {'median s':>9} {'range s':>15} {'Mbit/s':>8} {'x one pair':>10}")
for name, secs in rows:
    s = [float(x) for x in secs.split()]
    m = statistics.median(s)
    med[name] = m
    base = med[rows[0][0]]
    print(f"{name:<36} {m:>9.2f} {min(s):>7.2f}-{max(s):<7.2f} {size * 8 / m / 1e6:>8.1f} {base / m:>10.2f}")
EOF
log "results in $OUT"
