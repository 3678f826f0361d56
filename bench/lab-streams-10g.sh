#!/usr/bin/env bash
# bench/lab-streams-10g.sh: four CUBIC streams across the lab at 10 Gbit/s
# (issue 33): 10G x 20 ms (-w 16M) and 10G x 100 ms (-w 32M, the BDP of
# 125 MB over four streams), as root and as an unprivileged user, ROUNDS
# times each. For each run: its rate, valid or INVALID with the lab's
# words, the time its hosts' TUN-queue probes waited over 1 ms, and what
# held the emulator up, from the run's own record.
#
# -w needs net.core.rmem_max / wmem_max (global, not per namespace): they
# are raised to 256 MiB for the run and put back as they were on exit.
#
# Usage: bench/lab-streams-10g.sh [--rounds N] [--modes "root user"]
#        [--rtts "20ms 100ms"] [--gridperf PATH] [--user NAME]
# Needs root (the limits; the user series through runuser). Every process
# it starts it stops by pid; every lab it brings up it takes down by name.
BENCH_ARGS="$*" # the command line, for run_header (bench/lib.sh)
set -euo pipefail
BENCH=lab-streams-10g
REPO=$(cd "$(dirname "$0")/.." && pwd)
. "$REPO/bench/lib.sh"
GRIDPERF=$REPO/target/release/gridperf
ROUNDS=2 MODES="root user" RTTS="20ms 100ms" USER_=gridperf-bench
while [ $# -gt 0 ]; do
    case $1 in
        --rounds) ROUNDS=$2; shift 2 ;;
        --modes) MODES=$2; shift 2 ;;
        --rtts) RTTS=$2; shift 2 ;;
        --gridperf) GRIDPERF=$2; shift 2 ;;
        --user) USER_=$2; shift 2 ;;
        *) die "unknown argument $1" ;;
    esac
done
[ "$(id -u)" = 0 ] || die "run as root (net.core.rmem_max is global; the user series runs through runuser)"
[ -x "$GRIDPERF" ] || die "no $GRIDPERF: cargo build --release"
case $ROUNDS in ''|*[!0-9]*) die "--rounds takes a count" ;; esac
[ "$ROUNDS" -le 20 ] || die "--rounds: at most 20"
for r in $RTTS; do case $r in 20ms|100ms) ;; *) die "--rtts: 20ms and/or 100ms, not $r" ;; esac; done
WORK=$(mktemp -d /tmp/lab-streams-10g.XXXXXX)
chmod 755 "$WORK"
id "$USER_" >/dev/null 2>&1 || useradd --system --user-group --no-create-home --shell /usr/sbin/nologin "$USER_"
mkdir -p "$WORK/home"; chown "$USER_:$USER_" "$WORK/home"
old_r=$(sysctl -n net.core.rmem_max) old_w=$(sysctl -n net.core.wmem_max)
cleanup() {
    sysctl -qw net.core.rmem_max="$old_r" net.core.wmem_max="$old_w"
    rm -rf "$WORK"
}
trap cleanup EXIT
OUT=$REPO/bench/results/lab-streams-10g-$(date -u +%Y%m%d-%H%M%S).md
{
    echo "# Four CUBIC streams across the lab at 10 Gbit/s ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, $(uname -r))"
    echo
} >"$OUT"
run_header "$OUT"
sysctl -qw net.core.rmem_max=268435456 net.core.wmem_max=268435456
{
    echo "net.core.rmem_max / wmem_max raised to 256 MiB for the runs (put back to $old_r / $old_w after)."
    echo
    echo "| mode | path | run | exit | Gbit/s | TUN-queue waits over 1 ms | held up | the lab's verdict |"
    echo "|---|---|---|---|---|---|---|---|"
} >>"$OUT"
for round in $(seq "$ROUNDS"); do
    for mode in $MODES; do
        as=()
        [ "$mode" = user ] && as=(runuser -u "$USER_" -- env -i PATH=/usr/bin:/bin HOME="$WORK/home")
        for rtt in $RTTS; do
            case $rtt in
                20ms) args=(-w 16M -t 10 -O 3) ;;
                100ms) args=(-w 32M -t 15 -O 3) ;;
            esac
            j="$WORK/$mode-$rtt-$round.json"
            rc=0
            timeout 120 "${as[@]}" "$GRIDPERF" stream --lab baltic --lab-set rate=10G --lab-set rtt="$rtt" \
                -P 4 -C cubic "${args[@]}" --json --no-store >"$j" 2>"$j.err" || rc=$?
            row=$(python3 -c 'import json,sys
try:
    v=json.load(open(sys.argv[1])); r=v["runs"][0]; lab=r["env"]["lab"]; e=lab["emulator"]
    q=e.get("queue_waits",{}); up=e.get("uptime_s",0)
    slow="%.1f ms of %.1f s (worst %.1f ms)" % (q.get("slow_ns",0)/1e6, up, q.get("max_ns",0)/1e6)
    held="%d ms" % (e.get("held_up_ns",0)//1000000)
    why=(lab.get("invalid") or "valid").replace("|","/")
    print("%.2f | %s | %s | %s" % (r["up_bps"]/1e9, slow, held, why[:300]))
except Exception as x:
    print("- | - | - | no result: %s" % open(sys.argv[2]).read().strip().splitlines()[-1:])' "$j" "$j.err")
            echo "| $mode | 10G x $rtt | $round | $rc | $row |" >>"$OUT"
            log "$mode 10G x $rtt round $round: exit $rc: $row"
        done
    done
done
log "written: $OUT"
cat "$OUT"
