#!/usr/bin/env bash
# bench/copy-chaos.sh: copy's integrity under concurrency and faults, for
# hundreds of rounds: clients pushing and pulling overlapping names at
# once, some killed at random, the agent killed and started again, its
# tmpfs root filled by another writer, resumes of other sources of the
# same size and time. After every round the test checks that every file
# in place is one source byte for byte, that every copy that said done
# gave its own source's BLAKE3, and that nothing outside the root changed
# (crates/gridperf/tests/it/promises.rs,
# copies_under_concurrency_kills_and_restarts_keep_every_file_whole).
#
#   bench/copy-chaos.sh [--rounds N] [--seeds "1 2 3"]
#
# Prints one line per seed, and writes bench/results/copy-chaos-DATE.md.
BENCH_ARGS="$*" # the command line, for run_header (bench/lib.sh)
set -euo pipefail
BENCH=copy-chaos
REPO=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"
ROUNDS=100
SEEDS="1 2 3"
while [ $# -gt 0 ]; do
    case $1 in
        --rounds) ROUNDS=$2; shift 2 ;;
        --seeds) SEEDS=$2; shift 2 ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "$BENCH: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
out=$REPO/bench/results/copy-chaos-$(date -u +%Y%m%d-%H%M%S).md
{
    echo "# copy under concurrency and faults ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, $(uname -r))"
    echo
} >"$out"
run_header "$out"
{
    echo "\`bench/copy-chaos.sh --rounds $ROUNDS --seeds \"$SEEDS\"\`"
    echo
    echo "| seed | rounds | copies done and checked | killed | agent restarts | disks filled | result | seconds |"
    echo "|---|---|---|---|---|---|---|---|"
} >>"$out"
cd "$REPO"
cargo test --release -p gridperf --test it --no-run 2>/dev/null
for seed in $SEEDS; do
    t0=$(date +%s)
    log=$(GRIDPERF_CHAOS_ROUNDS=$ROUNDS GRIDPERF_CHAOS_SEED=$seed cargo test --release -q -p gridperf --test it -- \
        promises::copies_under_concurrency --nocapture 2>&1 || true)
    line=$(echo "$log" | grep '^chaos:' || true)
    result=$(echo "$log" | grep -q 'test result: ok' && echo "invariant held" || echo "FAILED")
    n() { echo "$line" | grep -o "[0-9]* $1" | grep -o '^[0-9]*' || echo '?'; }
    echo "seed $seed: $line ($result)"
    echo "| $seed | $ROUNDS | $(n 'copies done') | $(n killed) | $(n 'agent restarts') | $(n 'disks filled') | $result | $(( $(date +%s) - t0 )) |" >>"$out"
    [ "$result" = FAILED ] && echo "$log" | tail -30 >&2
done
echo "$BENCH: $out"
