#!/usr/bin/env bash
# bench/copy-cern-icepp.sh: the CERN-Tokyo study's disk-to-disk table
# (Tanaka et al., Test of data transfer over an international network with a large RTT, c. 2005: docs/sources.md; Table 3: bbftp, ~2 GB files, 1/2/4 streams,
# 8/16/32 MB buffers, 270 ms) with gridperf copy across the cern-icepp lab
# profile (1 Gbit/s, 270 ms, 0.001% loss), tmpfs to tmpfs.
#
#   bench/copy-cern-icepp.sh [--size 1G] [--cc cubic] [--gridperf PATH] [--out DIR]
#
# A copy whose lab emulator fell behind (the copy hashes and writes on the
# same CPUs) is INVALID: it is run again up to twice, then shown as such.
#
# Needs root for net.core.rmem_max / wmem_max (global: raised to 64 MiB for
# the run so that -w 32M is granted, and put back after). Prints a table of
# MB/s (10^6 bytes a second, as the study), draws it beside the study's
# figures (plot.svg, bench/copy_table_plot.py) and writes the JSON of each
# copy to --out. Each file is checked against its source (cmp) and its BLAKE3.
BENCH_ARGS="$*" # the command line, for run_header (bench/lib.sh)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
GRIDPERF=$REPO/target/release/gridperf
SIZE=1G
CC=cubic
OUT=$REPO/bench/results/copy-cern-icepp-$(date +%Y%m%d-%H%M%S)
while [ $# -gt 0 ]; do
    case "$1" in
        --size) SIZE=$2; shift 2 ;;
        --cc) CC=$2; shift 2 ;;
        --gridperf) GRIDPERF=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        *) echo "copy-cern-icepp: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" -eq 0 ] || { echo "copy-cern-icepp: needs root (net.core.rmem_max is global)" >&2; exit 2; }
[ -x "$GRIDPERF" ] || (cd "$REPO" && cargo build --release -p gridperf)
mkdir -p "$OUT"
BENCH=${BENCH:-copy-cern-icepp}
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"
run_header "$OUT/run.md"
WORK=$(mktemp -d /dev/shm/gridperf-copy-bench.XXXXXX)
old_r=$(sysctl -n net.core.rmem_max); old_w=$(sysctl -n net.core.wmem_max)
cleanup() {
    sysctl -qw net.core.rmem_max="$old_r" net.core.wmem_max="$old_w"
    rm -rf "$WORK"
}
trap cleanup EXIT
sysctl -qw net.core.rmem_max=67108864 net.core.wmem_max=67108864
bytes=$(numfmt --from=iec "$SIZE")
head -c "$bytes" /dev/urandom > "$WORK/file.dat"
want=$("$GRIDPERF" copy "$WORK/file.dat" "$WORK/ref.dat" --no-store --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["files"][0]["blake3"])')
rm -f "$WORK/ref.dat"
printf '%-10s %10s %10s %10s\n' "" "8 MB" "16 MB" "32 MB" | tee "$OUT/table.txt"
for p in 1 2 4; do
    row=$(printf '%-10s' "$p stream$([ "$p" -gt 1 ] && echo s)")
    for w in 8M 16M 32M; do
        mbs=INVALID
        for try in 1 2 3; do
            rm -rf "$WORK/out"
            rc=0
            "$GRIDPERF" copy --lab cern-icepp -P "$p" -w "$w" -C "$CC" --block 8M "$WORK/file.dat" "$WORK/out/" \
                --no-store --json > "$OUT/p$p-w$w.json" 2> "$OUT/p$p-w$w.err" || rc=$?
            if [ "$rc" -eq 4 ] && grep -q "invalid run" "$OUT/p$p-w$w.err"; then
                echo "copy-cern-icepp: P=$p w=$w: INVALID (try $try): $(tail -1 "$OUT/p$p-w$w.err")" >&2
                continue
            fi
            [ "$rc" -eq 0 ] || { cat "$OUT/p$p-w$w.err" >&2; exit 1; }
            cmp -s "$WORK/file.dat" "$WORK/out/file.dat" || { echo "copy-cern-icepp: P=$p w=$w: the copy differs" >&2; exit 1; }
            got=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["files"][0]["blake3"])' "$OUT/p$p-w$w.json")
            [ "$got" = "$want" ] || { echo "copy-cern-icepp: P=$p w=$w: BLAKE3 $got, want $want" >&2; exit 1; }
            mbs=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("%.1f" % (r["bytes_moved"]/r["seconds"]/1e6))' "$OUT/p$p-w$w.json")
            break
        done
        row="$row $(printf '%10s' "$mbs")"
    done
    echo "$row" | tee -a "$OUT/table.txt"
done
echo "copy-cern-icepp: $SIZE of random bytes, -C $CC, blocks of 8M; JSON in $OUT" | tee -a "$OUT/table.txt"
python3 "$REPO/bench/copy_table_plot.py" "$OUT/table.txt" "$OUT/plot.svg" &&
    echo "copy-cern-icepp: the table drawn beside the study's in $OUT/plot.svg"
