#!/usr/bin/env bash
# bench/lab-rate.sh: how faithful the lab is from 100 Mbit/s to 10 Gbit/s
# (issue 33), in one table: `gridperf lab calibrate` at each rate and
# one-way delay, as root and as an unprivileged user (no real-time
# priority), on a quiet machine and under a `nice -n 19` CPU hog on every
# CPU; with the emulator's CPU per Gbit/s, its memory (the delay line and
# queue it holds), and the ceiling: one iperf3 TCP stream over the kernel's
# own veth pair between two namespaces (no emulation), run in the same go.
#
# Usage: bench/lab-rate.sh [--rates 100M,1G,2.5G,5G,10G] [--delays 5ms,50ms]
#        [--modes "root user"] [--hog "off on"] [--seconds S] [--vm-keep-memory] [--gridperf PATH] [--user NAME]
# --vm-keep-memory stops the VM's free page reporting for the run and puts
# it back after (bench/lib.sh vm_keep_memory; docs/lab.md, "A VM that hands
# back its free memory"); the run header says which.
# Needs root (the user series runs through runuser; the veth pair). Every
# process it starts it stops by pid; the namespaces and the veth pair it
# makes it removes by name.
BENCH_ARGS="$*" # the command line, for run_header (bench/lib.sh)
set -euo pipefail
BENCH=lab-rate
REPO=$(cd "$(dirname "$0")/.." && pwd)
. "$REPO/bench/lib.sh"
GRIDPERF=$REPO/target/release/gridperf
RATES=100M,1G,2.5G,5G,10G DELAYS=5ms,50ms MODES="root user" HOGS="off on" SECS=3 USER_=gridperf-bench KEEP_MEMORY=0
while [ $# -gt 0 ]; do
    case $1 in
        --rates) RATES=$2; shift 2 ;;
        --delays) DELAYS=$2; shift 2 ;;
        --modes) MODES=$2; shift 2 ;;
        --hog) HOGS=$2; shift 2 ;;
        --seconds) SECS=$2; shift 2 ;;
        --gridperf) GRIDPERF=$2; shift 2 ;;
        --user) USER_=$2; shift 2 ;;
        --vm-keep-memory) KEEP_MEMORY=1; shift ;;
        *) die "unknown argument $1" ;;
    esac
done
[ "$(id -u)" = 0 ] || die "run as root (the user series runs through runuser)"
[ -x "$GRIDPERF" ] || die "no $GRIDPERF: cargo build --release"
command -v iperf3 >/dev/null || die "iperf3 is needed for the veth ceiling (bench/install-peers.sh)"
WORK=$(mktemp -d /tmp/lab-rate.XXXXXX)
chmod 755 "$WORK"
id "$USER_" >/dev/null 2>&1 || useradd --system --user-group --no-create-home --shell /usr/sbin/nologin "$USER_"
mkdir -p "$WORK/home"; chown "$USER_:$USER_" "$WORK/home"
HOGPIDS=() IPERF=
NSA=gp-bench-veth-a$$ NSB=gp-bench-veth-b$$
stop_hogs() {
    for p in "${HOGPIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    for p in "${HOGPIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
    HOGPIDS=()
}
cleanup() {
    stop_hogs
    [ -n "$IPERF" ] && kill "$IPERF" 2>/dev/null || true
    ip netns del "$NSA" 2>/dev/null || true
    ip netns del "$NSB" 2>/dev/null || true
}
trap 'cleanup; vm_memory_restore' EXIT
if [ "$KEEP_MEMORY" = 1 ]; then vm_keep_memory; fi
NCPU=$(nproc)
OUT=$REPO/bench/results/lab-rate-$(date -u +%Y%m%d-%H%M%S).md

# the ceiling: the kernel's own path between two namespaces, one TCP stream
ip netns add "$NSA"; ip netns add "$NSB"
ip link add gpv0 netns "$NSA" type veth peer name gpv1 netns "$NSB"
ip -n "$NSA" addr add 10.99.0.1/24 dev gpv0; ip -n "$NSB" addr add 10.99.0.2/24 dev gpv1
ip -n "$NSA" link set gpv0 up; ip -n "$NSB" link set gpv1 up
ip netns exec "$NSB" timeout 60 iperf3 -s -1 -B 10.99.0.2 >/dev/null 2>&1 & IPERF=$!
sleep 0.5
VETH=$(ip netns exec "$NSA" timeout 30 iperf3 -c 10.99.0.2 -t 5 -J | python3 -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9))')
wait "$IPERF" 2>/dev/null || true; IPERF=
cleanup

{
    echo "# The lab from 100 Mbit/s to 10 Gbit/s ($(date -u +%Y-%m-%dT%H:%MZ), $NCPU CPUs, $(uname -r), gridperf $(git -C "$REPO" rev-parse --short HEAD))"
    echo
} >"$OUT"
run_header "$OUT"
{
    echo "\`bench/lab-rate.sh --rates $RATES --delays $DELAYS --seconds $SECS\`: \`gridperf lab calibrate\` (1-BDP queues)"
    echo "as root and as an unprivileged user, without and with a \`nice -n 19\` busy loop on every CPU."
    echo "The ceiling, the kernel's veth pair between two namespaces, one iperf3 TCP stream for 5 s: **$VETH Gbit/s**."
    echo
    echo "The added delay's error, median and p99: the RTT of a probe sent every 1 ms at half load, less 2 x the delay, against the same probe's on a zero-delay lab of the rate (the baseline), median against median and p99 against p99 (the baseline's p99 the lowest of its four 0.5 s parts')."
    echo "The p99 against the baseline's median (the hosts' own spread in it too) is the column after, and the baseline's median / p99 the one after that."
    echo
    echo "| as | hog | rate | one-way delay | offered | UDP rate error | TCP | delay error median | p99 | p99 over the baseline's median | baseline median / p99 | probe p99, queue full | bound | lag p99 | emulator CPU | CPU per Gbit/s | delay line + queue | verdict |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
} >>"$OUT"
for mode in $MODES; do
    for hog in $HOGS; do
        as=()
        [ "$mode" = user ] && as=(runuser -u "$USER_" -- env -i PATH=/usr/bin:/bin HOME="$WORK/home")
        if [ "$hog" = on ]; then
            for _ in $(seq "$NCPU"); do
                timeout 1800 nice -n 19 sh -c 'while :; do :; done' &
                HOGPIDS+=($!)
            done
        fi
        log "$mode, hog $hog: calibrate $RATES x $DELAYS"
        J=$WORK/$mode-$hog.json
        # its own state directory: what calibration keeps (under a hog,
        # too) is not left for the user's labs after the bench
        mkdir -p "$WORK/state-$mode"; [ "$mode" = user ] && chown "$USER_:$USER_" "$WORK/state-$mode"
        rc=0
        (cd "$WORK" && timeout 1800 "${as[@]}" env XDG_STATE_HOME="$WORK/state-$mode" "$GRIDPERF" lab calibrate --rates "$RATES" --delays "$DELAYS" \
            --seconds "$SECS" --json >"$J" 2>"$WORK/$mode-$hog.err") || rc=$?
        stop_hogs
        # a calibrate that failed says why in the table: its exit and its last words
        python3 - "$J" "$mode" "$hog" "$rc" "$WORK/$mode-$hog.err" >>"$OUT" <<'PY'
import json, sys
path, mode, hog, rc, err = sys.argv[1:6]
try:
    pts = json.load(open(path))["points"]
except Exception as e:
    last = [l.strip() for l in open(err, errors="replace") if l.strip()][-1:] or ["(nothing on stderr)"]
    print(f"| {mode} | {hog} | calibrate failed (exit {rc}): {last[0].replace('|', '/')} |"); sys.exit()
# a TCP flow a window held below the link says so (tcpi_rwnd_limited +
# tcpi_sndbuf_limited; a flow at the link rate waits on the window too, at a full queue)
def win(p):
    w = p.get('tcp_window_limited', 0)
    th = f", threshold {p['tcp_receiver_threshold_bytes']//1024} KB" if 'tcp_receiver_threshold_bytes' in p else ""
    return f", on a window {w*100:.0f}% ({p.get('tcp_receive_window_bytes', 0)//1024} KB{th})" if w > 0.05 and p['tcp_rate_error'] < -0.05 else ""
def r(b): return f"{b/1e9:.2f} Gbit/s" if b >= 1e9 else f"{b/1e6:.1f} Mbit/s"
def t(ns): return f"{ns/1e6:.3g} ms" if abs(ns) >= 1e6 else f"{ns/1e3:+.0f} us"
for p in pts:
    gbit = p["rate_bps"] / 1e9
    line = p["rate_bps"] / 8 * (p["delay_ns"] / 1e9) + p["queue_bytes"]
    verdict = p["invalid"] or ("meets the targets" if p["targets_met"] else "misses a target")
    # a point measured again after an INVALID try says so, and why each was
    earlier = p.get("earlier_invalid", [])
    if earlier:
        verdict += f" (at try {p['tries']}; before it: " + "; ".join(f"try {i+1} INVALID: {w}" for i, w in enumerate(earlier)) + ")"
    print(f"| {mode} | {hog} | {r(p['rate_bps'])} | {p['delay_ns']/1e6:g} ms | {r(p['offered_rate_bps'])} "
          f"| {p['rate_error']*100:+.2f}% | {r(p['tcp_rate_bps'])}{win(p)} | {t(p['delay_error_median_ns'])} | {t(p['delay_error_p99_ns'])} "
          f"| {t(p['delay_error_p99_ns'] + p['baseline_rtt_p99_ns'] - p['baseline_rtt_ns'])} "
          f"| {p['baseline_rtt_ns']/1e3:.0f} / {p['baseline_rtt_p99_ns']/1e3:.0f} us "
          f"| {p['loaded_rtt_p99_ns']/1e6:.1f} ms | {p['queue_bound_ns']/1e6:.1f} ms | <{p['lag_p99_us']} us "
          f"| {p['emulator_cpu_percent']:.0f}% | {p['emulator_cpu_percent']/gbit:.0f}% | {line/1e6:.1f} MB | {verdict} |")
PY
    done
done
log "written $OUT"
cat "$OUT"
