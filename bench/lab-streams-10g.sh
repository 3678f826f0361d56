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
# The hypervisor's steal over each run (from /proc/stat, both CPUs, in
# its 10 ms ticks) is in the table: at 10G the emulator is near its CPU's
# end, and a run under steal falls behind reading. --idle S sleeps S
# seconds before each run (a run after a rest meets less steal on a
# shared VM than one after minutes of load). The CPU's pace before each
# run is in it too: 1 GiB through a pipe on the last CPU (where the lab
# pins its emulator from 5 Gbit/s), the copies into and out of the kernel
# that a TUN device's reads and writes are; a neighbour on a shared host
# slows it without any steal.
#
# Usage: bench/lab-streams-10g.sh [--rounds N] [--modes "root user"]
#        [--rtts "20ms 100ms"] [--idle S] [--gridperf PATH] [--user NAME]
# Needs root (the limits; the user series through runuser). Every process
# it starts it stops by pid; every lab it brings up it takes down by name.
BENCH_ARGS="$*" # the command line, for run_header (bench/lib.sh)
set -euo pipefail
BENCH=lab-streams-10g
REPO=$(cd "$(dirname "$0")/.." && pwd)
. "$REPO/bench/lib.sh"
GRIDPERF=$REPO/target/release/gridperf
ROUNDS=2 MODES="root user" RTTS="20ms 100ms" USER_=gridperf-bench IDLE=0
while [ $# -gt 0 ]; do
    case $1 in
        --rounds) ROUNDS=$2; shift 2 ;;
        --modes) MODES=$2; shift 2 ;;
        --rtts) RTTS=$2; shift 2 ;;
        --idle) IDLE=$2; shift 2 ;;
        --gridperf) GRIDPERF=$2; shift 2 ;;
        --user) USER_=$2; shift 2 ;;
        *) die "unknown argument $1" ;;
    esac
done
[ "$(id -u)" = 0 ] || die "run as root (net.core.rmem_max is global; the user series runs through runuser)"
[ -x "$GRIDPERF" ] || die "no $GRIDPERF: cargo build --release"
case $ROUNDS in ''|*[!0-9]*) die "--rounds takes a count" ;; esac
[ "$ROUNDS" -le 20 ] || die "--rounds: at most 20"
case $IDLE in ''|*[!0-9]*) die "--idle takes seconds" ;; esac
[ "$IDLE" -le 120 ] || die "--idle: at most 120 s"
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
    [ "$IDLE" -gt 0 ] && echo "$IDLE s idle before each run." && echo
    echo "| mode | path | run | exit | Gbit/s | TUN-queue waits over 1 ms | held up | steal over the run | 1 GiB piped before it | the lab's verdict |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
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
            sleep "$IDLE"
            cpu=$(( $(nproc) - 1 )) t0=$(date +%s%N)
            taskset -c "$cpu" dd if=/dev/zero bs=64k count=16384 status=none | taskset -c "$cpu" dd of=/dev/null bs=64k status=none
            pace="$(( ($(date +%s%N) - t0) / 1000000 )) ms"
            st0=$(awk '/^cpu /{print $9}' /proc/stat)
            timeout 120 "${as[@]}" "$GRIDPERF" stream --lab baltic --lab-set rate=10G --lab-set rtt="$rtt" \
                -P 4 -C cubic "${args[@]}" --json --no-store >"$j" 2>"$j.err" || rc=$?
            steal="$(( ($(awk '/^cpu /{print $9}' /proc/stat) - st0) * 1000 / $(getconf CLK_TCK) )) ms"
            row=$(python3 -c 'import json,sys
try:
    v=json.load(open(sys.argv[1])); r=v["runs"][0]; lab=r["env"]["lab"]; e=lab["emulator"]
    q=e.get("queue_waits",{}); up=e.get("uptime_s",0)
    slow="%.1f ms of %.1f s (worst %.1f ms)" % (q.get("slow_ns",0)/1e6, up, q.get("max_ns",0)/1e6)
    held="%d ms" % (e.get("held_up_ns",0)//1000000)
    why=(lab.get("invalid") or "valid").replace("|","/")
    print("%.2f | %s | %s | %s | %s | %s" % (r["up_bps"]/1e9, slow, held, sys.argv[3], sys.argv[4], why[:300]))
except Exception as x:
    print("- | - | - | %s | %s | no result: %s" % (sys.argv[3], sys.argv[4], open(sys.argv[2]).read().strip().splitlines()[-1:]))' "$j" "$j.err" "$steal" "$pace")
            echo "| $mode | 10G x $rtt | $round | $rc | $row |" >>"$OUT"
            log "$mode 10G x $rtt round $round: exit $rc: $row"
        done
    done
done
log "written: $OUT"
cat "$OUT"
