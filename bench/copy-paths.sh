#!/usr/bin/env bash
# bench/copy-paths.sh: what restarting a slow stream, the tail and -P auto
# are worth (issue 18), in one run, across gridperf's lab.
#
# Part 1: the cern-icepp profile (1 Gbit/s, 270 ms) as 4 parallel paths of
# 250 Mbit/s (a link aggregate: each connection's 5-tuple hashed onto one),
# path 2 losing 1%; 8 streams of CUBIC (BBR shrugs random loss off), one
# file pushed a -> b (--streams: fewer than the good paths leaves capacity
# a stream stranded on the bad one cannot use): gridperf copy as it is (restarts and the tail), with
# --no-restart, with --no-restart --no-tail, and with --split static (each
# stream a fixed slice, as bbftp does), ROUNDS rounds each, interleaved. A
# static copy that is not done after STATIC_CAP seconds is stopped, and its
# line says how much had moved.
#
# Part 2: -P auto against fixed -P 1, 2, 4, 8 on the cern-icepp and wan
# profiles (one path each, their own loss, the namespaces' congestion
# control): the best fixed count and how far -P auto is from it.
#
#   bench/copy-paths.sh [--rounds 3] [--size 2G] [--size-wan 64M] [--window 32M]
#       [--static-cap 180] [--streams 8] [--part 1|2|all] [--gridperf PATH] [--out DIR]
#
# Each copy is checked with cmp; one during which the lab's emulator fell
# behind (INVALID, exit 4) is run again, up to twice. Needs root:
# net.core.rmem_max / wmem_max are raised to 64 MiB for -w (global: put back
# after). Prints a table per part; the JSON of every copy is kept in OUT.
BENCH_ARGS="$*" # the command line, for run_header (bench/lib.sh)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
GRIDPERF=$REPO/target/release/gridperf
ROUNDS=3
SIZE=2G
SIZE_WAN=64M
WINDOW=32M
STATIC_CAP=180
STREAMS=8
PART=all
OUT=$REPO/bench/results/copy-paths-$(date +%Y%m%d-%H%M%S)
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --size) SIZE=$2; shift 2 ;;
        --size-wan) SIZE_WAN=$2; shift 2 ;;
        --window) WINDOW=$2; shift 2 ;;
        --static-cap) STATIC_CAP=$2; shift 2 ;;
        --streams) STREAMS=$2; shift 2 ;;
        --part) PART=$2; shift 2 ;;
        --gridperf) GRIDPERF=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        *) echo "copy-paths: unknown argument $1" >&2; exit 2 ;;
    esac
done
BENCH=copy-paths
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"
[ "$(id -u)" -eq 0 ] || die "needs root (net.core.rmem_max is global)"
[ -x "$GRIDPERF" ] || (cd "$REPO" && cargo build --release -p gridperf)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
run_header "$OUT/run.md"
WORK=$(mktemp -d /dev/shm/gridperf-copy-paths.XXXXXX)
old_r=$(sysctl -n net.core.rmem_max)
old_w=$(sysctl -n net.core.wmem_max)
cleanup() {
    sysctl -qw net.core.rmem_max="$old_r" net.core.wmem_max="$old_w"
    rm -rf "$WORK"
}
trap cleanup EXIT
sysctl -qw net.core.rmem_max=67108864 net.core.wmem_max=67108864

# copy TAG TIMEOUT SRC ARGS...: one copy into a fresh directory, rerun while
# INVALID; prints "seconds restarts tail status" and keeps its JSON
copy() {
    local tag=$1 cap=$2 src=$3
    shift 3
    local json=$OUT/$tag.json status
    for attempt in 1 2 3; do
        rm -rf "$WORK/dst"
        mkdir -p "$WORK/dst"
        status=0
        timeout --signal=INT "$cap" "$GRIDPERF" copy --no-store --json "$src" "$WORK/dst/" "$@" \
            >"$json" 2>"$OUT/$tag.err" || status=$?
        [ "$status" -eq 4 ] && [ "$attempt" -lt 3 ] && { echo "  $tag INVALID, again" >&2; continue; }
        break
    done
    if [ "$status" -eq 0 ]; then
        cmp -s "$src" "$WORK/dst/$(basename "$src")" || die "$tag: the copy differs"
        python3 - "$json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
ev = d.get("events", [])
n = lambda k: sum(1 for e in ev if e["kind"] == k)
most = len(d["per_stream"])
print(f'{d["seconds"]:.1f} {n("restart")} {d.get("tail_blocks", 0)} ok {most}')
EOF
    else
        # stopped (the cap) or failed: how much of the file had arrived
        # verified (the manifest: a JSON line, then 40 bytes per block)
        local moved
        moved=$(python3 - "$WORK/dst" "$src" <<'PY'
import glob, json, os, sys
m = glob.glob(os.path.join(sys.argv[1], ".*.gridperf-manifest"))
size = os.path.getsize(sys.argv[2])
if not m:
    print("0%")
else:
    head, rest = open(m[0], "rb").read().split(b"\n", 1)
    block = json.loads(head)["block"]
    print(f"{100 * min(len(rest) // 40 * block, size) / size:.0f}%")
PY
)
        echo "$cap - - stopped($status):${moved}-moved 0"
    fi
}

window=$(numfmt --from=iec "$WINDOW")
if [ "$PART" = all ] || [ "$PART" = 1 ]; then
    head -c "$(numfmt --from=iec "$SIZE")" /dev/urandom >"$WORK/f.dat"
    PATHS=(--lab cern-icepp --lab-set paths=4 --lab-set "path2:loss=1%" -P "$STREAMS" -C cubic -w "$WINDOW")
    declare -A MODE=(
        [restart]=""
        [no-restart]="--no-restart"
        [neither]="--no-restart --no-tail"
        [static]="--split static"
    )
    echo "part 1: cern-icepp as 4 paths of 250 Mbit/s, path 2 at 1% loss; $STREAMS CUBIC streams, -w $WINDOW, $SIZE"
    printf '%-12s %-6s %9s %9s %6s  %s\n' mode round seconds restarts tail status | tee "$OUT/part1.txt"
    for round in $(seq 1 "$ROUNDS"); do
        for mode in restart no-restart neither static; do
            cap=600
            [ "$mode" = static ] && cap=$STATIC_CAP
            # shellcheck disable=SC2086
            read -r secs restarts tail status _ < <(copy "p1-$mode-$round" "$cap" "$WORK/f.dat" "${PATHS[@]}" ${MODE[$mode]})
            printf '%-12s %-6s %9s %9s %6s  %s\n' "$mode" "$round" "$secs" "$restarts" "$tail" "$status" | tee -a "$OUT/part1.txt"
        done
    done
    python3 - "$OUT/part1.txt" "$STATIC_CAP" <<'EOF' | tee -a "$OUT/part1.txt"
import sys, statistics
rows = [l.split() for l in open(sys.argv[1]).read().splitlines()[1:] if l.strip()]
by = {}
for m, r, s, *_ in rows:
    by.setdefault(m, []).append(s)
base = None
for m in ["restart", "no-restart", "neither", "static"]:
    v = by.get(m, [])
    done = [float(x) for x in v if x not in ("-",)]
    if not done:
        continue
    med = statistics.median(done)
    base = base or med
    capped = sum(1 for x in v if float(x) >= float(sys.argv[2]) and m == "static")
    note = f" ({capped} of {len(v)} stopped at the cap: at least that)" if capped else ""
    print(f"median {m:<11} {med:7.1f} s  range {min(done):.1f}-{max(done):.1f}  {med / base:.2f}x the restarting copy's time{note}")
EOF
fi

if [ "$PART" = all ] || [ "$PART" = 2 ]; then
    head -c "$(numfmt --from=iec "$SIZE")" /dev/urandom >"$WORK/f.dat"
    head -c "$(numfmt --from=iec "$SIZE_WAN")" /dev/urandom >"$WORK/w.dat"
    echo "part 2: -P auto against fixed -P on cern-icepp ($SIZE) and wan ($SIZE_WAN), -w $WINDOW"
    printf '%-11s %-6s %-6s %9s %6s\n' profile P round seconds most | tee "$OUT/part2.txt"
    for profile in cern-icepp wan; do
        src=$WORK/f.dat
        [ "$profile" = wan ] && src=$WORK/w.dat
        for round in $(seq 1 "$ROUNDS"); do
            for p in 1 2 4 8 auto; do
                read -r secs _ _ status most < <(copy "p2-$profile-$p-$round" 900 "$src" --lab "$profile" -P "$p" -w "$WINDOW")
                printf '%-11s %-6s %-6s %9s %6s\n' "$profile" "$p" "$round" "$secs" "$most" | tee -a "$OUT/part2.txt"
            done
        done
    done
    python3 - "$OUT/part2.txt" <<'EOF' | tee -a "$OUT/part2.txt"
import sys, statistics
rows = [l.split() for l in open(sys.argv[1]).read().splitlines()[1:] if l.strip()]
for profile in ["cern-icepp", "wan"]:
    med = {}
    for p in ["1", "2", "4", "8", "auto"]:
        v = [float(r[3]) for r in rows if r[0] == profile and r[1] == p and r[3] != "-"]
        if v:
            med[p] = statistics.median(v)
    fixed = {p: s for p, s in med.items() if p != "auto"}
    if not fixed or "auto" not in med:
        continue
    best = min(fixed, key=fixed.get)
    print(f"{profile}: medians " + ", ".join(f"-P {p} {s:.1f} s" for p, s in med.items())
          + f"; the best fixed is -P {best}; -P auto takes {med['auto'] / fixed[best]:.2f}x its time")
EOF
fi
echo "copy-paths: results in $OUT"
