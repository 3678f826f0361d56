#!/usr/bin/env bash
# bench/survey-quick.sh: how long a quick survey takes, and whether its
# conclusions hold from one run to the next (issue 35).
#
# PAIRS pairs of `gridperf survey --quick` runs back to back (wall time of
# each, start to report), then `survey local --quick` pairs under a
# `nice -n 19` CPU hog on every CPU (what a compile does to a developer's
# machine); each run's best-protocol table (in summary.md), and bench/survey_agree.py on
# every pair: sizes claimed, claimed by one run only, contradictions.
# With --full FILE (a `gridperf survey --json` output of a full survey),
# each quick run is compared with it too.
#
# Usage: bench/survey-quick.sh [--pairs N] [--hog-pairs N] [--full FILE] [--gridperf PATH]
# Every process it starts it stops by pid; each run has a store of its own.
BENCH_ARGS="$*" # the command line, for run_header (bench/lib.sh)
set -euo pipefail
BENCH=survey-quick
REPO=$(cd "$(dirname "$0")/.." && pwd)
. "$REPO/bench/lib.sh"
GRIDPERF=$REPO/target/release/gridperf
PAIRS=3 HOG_PAIRS=2 FULL=
while [ $# -gt 0 ]; do
    case $1 in
        --pairs) PAIRS=$2; shift 2 ;;
        --hog-pairs) HOG_PAIRS=$2; shift 2 ;;
        --full) FULL=$2; shift 2 ;;
        --gridperf) GRIDPERF=$2; shift 2 ;;
        *) die "unknown argument $1" ;;
    esac
done
[ -x "$GRIDPERF" ] || die "no $GRIDPERF: cargo build --release"
for n in "$PAIRS" "$HOG_PAIRS"; do
    case $n in ''|*[!0-9]*) die "--pairs and --hog-pairs take a count" ;; esac
    [ "$n" -le 10 ] || die "at most 10 pairs"
done
STAMP=$(date +%Y%m%d-%H%M%S)
OUT=$REPO/bench/results/$BENCH-$STAMP
mkdir -p "$OUT"
run_header "$OUT/run.md"
WORK=$(mktemp -d /tmp/$BENCH.XXXXXX)
HOGPIDS=()
stop_hogs() {
    for p in "${HOGPIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    for p in "${HOGPIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
    HOGPIDS=()
}
trap 'stop_hogs; rm -rf "$WORK"' EXIT
NCPU=$(nproc)

# one_run NAME ARGS...: a survey with its own store, timed; its JSON and table kept
one_run() {
    local name=$1; shift
    local t0 t1 rc=0
    t0=$(date +%s.%N)
    "$GRIDPERF" survey "$@" --db "$WORK/$name.db" -o "$OUT/$name.html" --json >"$OUT/$name.json" 2>"$WORK/$name.err" || rc=$?
    t1=$(date +%s.%N)
    "$GRIDPERF" report --db "$WORK/$name.db" -o "$WORK/$name-again.html" >"$WORK/$name.txt" 2>/dev/null || true
    printf '%s\t%s\t%.1f\n' "$name" "$rc" "$(echo "$t1 - $t0" | bc)" >>"$OUT/times.tsv"
    log "$name: exit $rc, $(echo "$t1 - $t0" | bc | cut -d. -f1) s"
}

: >"$OUT/times.tsv"
quick=()
for p in $(seq "$PAIRS"); do
    for k in a b; do
        one_run "quick-$p$k" --quick
        quick+=("$OUT/quick-$p$k.json")
    done
done
hog=()
for p in $(seq "$HOG_PAIRS"); do
    for _ in $(seq "$NCPU"); do
        # bounded: a hog ends by itself after the longest pair could take
        timeout 900 nice -n 19 sh -c 'while :; do :; done' &
        HOGPIDS+=($!)
    done
    for k in a b; do
        one_run "hog-$p$k" local --quick
        hog+=("$OUT/hog-$p$k.json")
    done
    stop_hogs
done
{
    echo "# survey --quick: time and agreement ($STAMP)"
    echo
    echo "$(uname -sr), $NCPU CPUs, $("$GRIDPERF" --version)"
    echo
    echo "| run | exit | seconds |"
    echo "|---|---|---|"
    while IFS=$'\t' read -r n rc s; do echo "| $n | $rc | $s |"; done <"$OUT/times.tsv"
    echo
    echo '```'
    for p in $(seq "$PAIRS"); do
        python3 "$REPO/bench/survey_agree.py" ${FULL:+--full "$FULL"} "$OUT/quick-${p}a.json" "$OUT/quick-${p}b.json" || true
    done
    for p in $(seq "$HOG_PAIRS"); do
        python3 "$REPO/bench/survey_agree.py" "$OUT/hog-${p}a.json" "$OUT/hog-${p}b.json" || true
    done
    echo '```'
    echo
    echo "## Each run's table"
    for f in "$WORK"/*.txt; do
        echo
        echo "### $(basename "$f" .txt)"
        echo
        echo '```'
        grep -v '^$' "$f" | grep -v '^A protocol is faster\|^comes from\|^from second\|^left out (a\|^INVALID was\|^report:' || true
        echo '```'
    done
} >"$OUT/summary.md"
cat "$OUT/summary.md"
