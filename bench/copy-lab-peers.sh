#!/usr/bin/env bash
# bench/copy-lab-peers.sh: gridperf copy next to GridFTP (globus-url-copy
# to a globus-gridftp-server) and XRootD (xrdcp to an xrootd) across the
# lab, in one run: each server started on lab host b, each client on host a,
# one file pushed a -> b with 1, 2 and 4 streams, tmpfs to tmpfs, on the
# cern-icepp profile (1 Gbit/s, 270 ms, 0.001% loss) and the wan profile
# (20 Mbit/s, 180 ms, 0.5% loss).
#
#   bench/copy-lab-peers.sh [--profiles cern-icepp,wan] [--size-cern-icepp 2G]
#       [--size-wan 64M] [--window 32M] [--window-lambda 8M]
#       [--streams 1,2,4] [--tools gridperf,gridftp,xrootd,gridftp-verify] [--no-stream-ref]
#       [--set-PROFILE FIELD=VALUE[,FIELD=VALUE]] [--vm-keep-memory] [--gridperf PATH] [--out DIR]
#
# --vm-keep-memory: on a VM that hands its free memory back to the
# hypervisor (free page reporting), stop that for the run and put it back
# after (bench/lib.sh vm_keep_memory; docs/lab.md): a 10 Gbit/s copy there
# writes 4 GiB into tmpfs, each page faulted in again by the hypervisor.
#
# --set-PROFILE overrides fields of that profile's lab as `lab up --set`
# does: `--profiles baltic --set-baltic rate=10G` is 10 Gbit/s x 20 ms.
#
# gridftp-verify is globus-url-copy with -verify-checksum (the server's MD5
# of the file against the client's, after the transfer): a copy that is
# verified, as every gridperf copy is (blake3 per block, at both ends).
#
# --streams takes counts and `auto` (gridperf's -P auto; the peers have
# none, their cells show "-"); --no-stream-ref leaves out the `gridperf
# stream` reference runs. The same buffers for everyone: globus-url-copy
# -tcp-bs and gridperf -w WINDOW per stream (--window-PROFILE for one
# profile, e.g. its BDP); xrdcp has no buffer option, so the hosts' autotuning
# may reach 64 MiB (net.ipv4.tcp_rmem / tcp_wmem in the lab's namespaces)
# and net.core.rmem_max / wmem_max are raised to 64 MiB for the run (global:
# put back after). Congestion control: the namespaces' default (bbr here;
# a user namespace may not choose another for the peers).
#
# Prints, per profile, each tool's wall time of the client command
# (connection, handshakes at the profile's RTT, transfer, and for gridperf
# the verification of every block) and its goodput against the link's
# (the rate times 1448/1500: TCP payload per 1500-byte packet, less the
# profile's loss). Then, per stream count, `gridperf stream` moving the
# same bytes a -> b memory to memory (no files, no hashing): each gridperf
# copy's transfer alone next to what TCP itself carries on the path, the
# reference for "as fast as the network allows". A copy during which the
# lab's emulator fell behind, by the rule every gridperf run across a lab
# is judged by (`gridperf lab status --since`; README "The emulator watches
# itself"), is INVALID and run again, up to twice; each try's verdict is in
# verdicts.txt. (Before 2026-11-26 the bench had a stricter rule of its
# own: any packet over 10 ms late.) Every copy is checked
# with cmp. Needs root; installs globus-gridftp-server-progs
# globus-gass-copy-progs xrootd-server xrootd-client if missing. Ports
# 5811, 5812, 5814 on host b.
BENCH_ARGS="$*" # the command line, for run_header (bench/lib.sh)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
GRIDPERF=$REPO/target/release/gridperf
PROFILES=cern-icepp,wan
declare -A SIZE=([cern-icepp]=2G [wan]=64M)
declare -A WIN=()
declare -A SETS=()
WINDOW=32M
STREAMS=1,2,4
TOOLS=gridperf,gridftp,xrootd
STREAM_REF=1
KEEP_MEMORY=0
OUT=$REPO/bench/results/copy-lab-peers-$(date +%Y%m%d-%H%M%S)
while [ $# -gt 0 ]; do
    case "$1" in
        --profiles) PROFILES=$2; shift 2 ;;
        --size-*) SIZE[${1#--size-}]=$2; shift 2 ;;
        --window) WINDOW=$2; shift 2 ;;
        --window-*) WIN[${1#--window-}]=$2; shift 2 ;;
        --set-*) SETS[${1#--set-}]=$2; shift 2 ;;
        --streams) STREAMS=$2; shift 2 ;;
        --tools) TOOLS=$2; shift 2 ;;
        --no-stream-ref) STREAM_REF=0; shift ;;
        --vm-keep-memory) KEEP_MEMORY=1; shift ;;
        --gridperf) GRIDPERF=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        *) echo "copy-lab-peers: unknown argument $1" >&2; exit 2 ;;
    esac
done
BENCH=copy-lab-peers
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"
[ "$(id -u)" -eq 0 ] || die "needs root (net.core.rmem_max is global; the servers' users; the packages)"
install_debs globus-gridftp-server-progs globus-gass-copy-progs xrootd-server xrootd-client
[ -x "$GRIDPERF" ] || (cd "$REPO" && cargo build --release -p gridperf)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LAB=cpl$$
WORK=$(mktemp -d /dev/shm/gridperf-copy-lab.XXXXXX)
chmod 755 "$WORK"
old_r=$(sysctl -n net.core.rmem_max)
old_w=$(sysctl -n net.core.wmem_max)
PIDS=()
stop_servers() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}
cleanup() {
    stop_servers
    "$GRIDPERF" lab down --name "$LAB" >/dev/null 2>&1 || true
    sysctl -qw net.core.rmem_max="$old_r" net.core.wmem_max="$old_w"
    vm_memory_restore
    cp "$WORK"/logs/* "$OUT"/ 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
if [ "$KEEP_MEMORY" = 1 ]; then vm_keep_memory; fi
run_header "$OUT/run.md"
sysctl -qw net.core.rmem_max=67108864 net.core.wmem_max=67108864
for d in gridftp xrootd gridperf logs; do mkdir -p "$WORK/$d"; done
chmod 777 "$WORK/gridftp" "$WORK/xrootd"
chmod 1777 "$WORK/logs"
printf 'all.export %s\nxrd.port 5812\n' "$WORK" > "$WORK/xrd.cfg"

# on HOST CMD...: CMD on a lab host, with an /etc/hosts of the lab's own
# (in a mount namespace of its own): the peers look up the machine's name
# and their addresses, which the lab's namespaces have no DNS to answer
on() {
    local host=$1
    shift
    "$GRIDPERF" lab exec --name "$LAB" "$host" -- unshare --mount sh -c \
        'mount --bind "$0" /etc/hosts && exec "$@"' "$WORK/hosts-$host" "$@"
}

health() { "$GRIDPERF" lab status --name "$LAB" --json > "$1"; }
# valid BEFORE: the emulator kept up since the snapshot BEFORE, by the rule
# every gridperf run across a lab is judged by (lab status --since: held up
# for at most 1% of the span, at most 1% of packets over 1 ms late, no pause
# of 200 ms, no drop the model did not make); its verdict line is printed
valid() {
    local said rc=0
    said=$("$GRIDPERF" lab status --name "$LAB" --since "$1" 2>&1) || rc=$?
    echo "$said" | head -1
    [ "$rc" -eq 0 ]
}

# one TOOL P: a copy a -> b; its wall time in seconds, or INVALID
one() {
    local tool=$1 p=$2 dest t0 t1 try rc
    case "$tool" in
        gridftp | gridftp-verify) dest=$WORK/gridftp/file.dat ;;
        xrootd) dest=$WORK/xrootd/file.dat ;;
        gridperf) dest=$WORK/gridperf/file.dat ;;
    esac
    for try in 1 2 3; do
        rm -f "$dest"
        health "$WORK/h0.json"
        t0=$(date +%s.%N)
        rc=0
        case "$tool" in
            gridftp) on a timeout 1800 globus-url-copy -fast -p "$p" -tcp-bs "$window" \
                "file://$WORK/file.dat" "ftp://$B:5811$dest" ;;
            # with its checksum checked after the transfer (MD5 at both ends,
            # as the server computes it): GridFTP's way to verify a copy
            gridftp-verify) on a timeout 1800 globus-url-copy -fast -p "$p" -tcp-bs "$window" -verify-checksum \
                "file://$WORK/file.dat" "ftp://$B:5811$dest" ;;
            xrootd) on a timeout 1800 xrdcp -s -f -S "$p" "$WORK/file.dat" \
                "root://$B:5812/$dest" ;;
            gridperf) timeout 1800 "$GRIDPERF" lab exec --name "$LAB" a -- "$GRIDPERF" copy "$WORK/file.dat" "$B:" \
                --port 5814 -P "$p" -w "$win" --no-store --json > "$OUT/$PROFILE-gridperf-p$p.json" ;;
        esac >> "$OUT/clients.log" 2>&1 || rc=$?
        t1=$(date +%s.%N)
        # exit 4: gridperf copy judged the lab itself and found its emulator
        # fell behind (INVALID); the file it wrote must still be whole
        [ "$rc" -eq 0 ] || { [ "$tool" = gridperf ] && [ "$rc" -eq 4 ]; } \
            || die "$PROFILE: $tool -P $p failed (exit $rc; see $OUT/clients.log)"
        cmp -s "$WORK/file.dat" "$dest" || die "$PROFILE: $tool -P $p: the copy differs"
        rm -f "$dest"
        if [ "$rc" -eq 4 ]; then
            why="INVALID by its own check (gridperf copy exit 4; see $OUT/clients.log)"
        elif why=$(valid "$WORK/h0.json"); then
            echo "$t0 $t1" | awk '{ printf "%.3f\n", $2 - $1 }'
            echo "$PROFILE $tool -P $p try $try: $why" >> "$OUT/verdicts.txt"
            return 0
        fi
        echo "$PROFILE $tool -P $p try $try: $why" >> "$OUT/verdicts.txt"
        log "$PROFILE: $tool -P $p: $why (try $try)"
    done
    echo INVALID
}

# tcp P: the same bytes memory to memory, a -> b, over P streams of
# `gridperf stream` (no files, no hashing): what TCP itself carries on
# this path, the reference for a copy's transfer; its JSON, or nothing
tcp() {
    local p=$1 try rc
    for try in 1 2 3; do
        health "$WORK/h0.json"
        rc=0
        timeout 1800 "$GRIDPERF" lab exec --name "$LAB" a -- "$GRIDPERF" stream "$B" --port 5814 -P "$p" \
            -n $((bytes / p)) -t 20m -w "$win" --no-store --json > "$OUT/$PROFILE-stream-p$p.json" \
            2>> "$OUT/clients.log" || rc=$?
        # exit 4: stream saw the lab's emulator fall behind itself (INVALID)
        [ "$rc" -eq 0 ] || [ "$rc" -eq 4 ] || die "$PROFILE: stream -P $p failed (exit $rc; see $OUT/clients.log)"
        if [ "$rc" -eq 0 ] && why=$(valid "$WORK/h0.json"); then
            return 0
        fi
        log "$PROFILE: stream -P $p: ${why:-INVALID by its own check} (try $try)"
    done
    rm -f "$OUT/$PROFILE-stream-p$p.json"
}

: > "$OUT/times.txt"
IFS=, read -r -a profs <<< "$PROFILES"
for PROFILE in "${profs[@]}"; do
    size=${SIZE[$PROFILE]:-64M}
    win=${WIN[$PROFILE]:-$WINDOW}
    window=$(numfmt --from=iec "$win")
    bytes=$(numfmt --from=iec "$size")
    head -c "$bytes" /dev/urandom > "$WORK/file.dat"
    chmod 644 "$WORK/file.dat"
    sets=()
    IFS=, read -r -a kv <<< "${SETS[$PROFILE]:-}"
    for s in "${kv[@]}"; do sets+=(--set "$s"); done
    "$GRIDPERF" lab up --name "$LAB" --profile "$PROFILE" "${sets[@]}" \
        --sysctl "net.ipv4.tcp_rmem=4096 131072 67108864" --sysctl "net.ipv4.tcp_wmem=4096 16384 67108864" \
        > "$OUT/$PROFILE-lab.txt" 2>&1 || die "lab up $PROFILE failed (see $OUT/$PROFILE-lab.txt)"
    B=$("$GRIDPERF" lab status --name "$LAB" --json |
        python3 -c 'import json,sys; print([h["addr"] for h in json.load(sys.stdin)["lab"]["hosts"] if h["name"] == "b"][0])')
    rate=$("$GRIDPERF" lab status --name "$LAB" --json |
        python3 -c 'import json,sys; s=json.load(sys.stdin)["lab"]["spec"]["ab"]; l=s["loss"]; p=l["Random"]["p"] if isinstance(l, dict) and "Random" in l else 0; print(s["rate_bps"] * 1448 / 1500 * (1 - p))')
    A=$("$GRIDPERF" lab status --name "$LAB" --json |
        python3 -c 'import json,sys; print([h["addr"] for h in json.load(sys.stdin)["lab"]["hosts"] if h["name"] == "a"][0])')
    printf '127.0.0.1 localhost\n%s lab-a %s\n%s lab-b\n' "$A" "$(hostname)" "$B" > "$WORK/hosts-a"
    printf '127.0.0.1 localhost\n%s lab-b %s\n%s lab-a\n' "$B" "$(hostname)" "$A" > "$WORK/hosts-b"
    # the servers on b, each ended by the pid of its lab exec
    on b globus-gridftp-server -aa -anonymous-user nobody -p 5811 \
        -control-interface "$B" -data-interface "$B" -d error -l "$WORK/logs/$PROFILE-gridftp.log" \
        > "$OUT/$PROFILE-gridftp.out" 2>&1 &
    PIDS+=($!)
    on b xrootd -c "$WORK/xrd.cfg" -l "$WORK/logs/$PROFILE-xrootd.log" -R nobody \
        > "$OUT/$PROFILE-xrootd.out" 2>&1 &
    PIDS+=($!)
    "$GRIDPERF" lab exec --name "$LAB" b -- "$GRIDPERF" serve --bind "$B" --port 5814 --root "$WORK/gridperf" \
        --allow 10.77.0.0/16 > "$OUT/$PROFILE-gridperf-serve.out" 2>&1 &
    PIDS+=($!)
    for port in 5811 5812 5814; do
        for _ in $(seq 100); do
            "$GRIDPERF" lab exec --name "$LAB" a -- bash -c "exec 3<>/dev/tcp/$B/$port" 2>/dev/null && break
            sleep 0.1
        done
    done
    IFS=, read -r -a counts <<< "$STREAMS"
    IFS=, read -r -a tools <<< "$TOOLS"
    for p in "${counts[@]}"; do
        for tool in "${tools[@]}"; do
            # the peers choose no stream count of their own
            [ "$p" = auto ] && [ "$tool" != gridperf ] && continue
            s=$(one "$tool" "$p")
            echo "$PROFILE $tool $p $s $bytes $rate $win" | tee -a "$OUT/times.txt" >&2
        done
        [ "$STREAM_REF" = 1 ] && [ "$p" != auto ] && tcp "$p"
    done
    stop_servers
    "$GRIDPERF" lab down --name "$LAB" >/dev/null
done
python3 - "$OUT/times.txt" "$TOOLS" "$OUT" <<'PY' | tee "$OUT/table.txt"
import json, os, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
tools = sys.argv[2].split(",")


def used(prof, p):
    """The connections a gridperf copy opened, a restart's new one counted (-P auto's additions too)."""
    path = os.path.join(sys.argv[3], f"{prof}-gridperf-p{p}.json")
    if not os.path.exists(path):
        return "-"
    d = json.load(open(path))
    return str(max([len(d.get("per_stream", []))] + [e.get("new_stream") or 0 for e in d.get("events", [])]))


for prof in dict.fromkeys(r[0] for r in rows):
    rs = [r for r in rows if r[0] == prof]
    size, rate, win = int(rs[0][4]), float(rs[0][5]), rs[0][6]
    print(f"{prof}: {size / 2**20:g} MiB a -> b, tmpfs to tmpfs, {win} buffers; "
          f"link goodput {rate / 1e6:.1f} Mbit/s; wall time, Mbit/s, % of the link's goodput")
    print(f"  {'streams':<8}" + "".join(f"{t:>26}" for t in tools) + "   gridperf / best peer   gridperf's connections")
    for p in dict.fromkeys(r[2] for r in rs):
        cells, secs = [], {}
        for t in tools:
            r = [x for x in rs if x[1] == t and x[2] == p]
            if not r:
                cells.append(f"{'-':>26}")
                continue
            if r[0][3] == "INVALID":
                cells.append(f"{'INVALID':>26}")
                continue
            s = float(r[0][3]); secs[t] = s
            mbit = size * 8 / s / 1e6
            cells.append(f"{s:>8.1f} s {mbit:>7.1f} {100 * mbit * 1e6 / rate:>5.0f}%")
        peers = [v for k, v in secs.items() if k != "gridperf"]
        ratio = f"{min(peers) / secs['gridperf']:.2f}x" if "gridperf" in secs and peers else "-"
        print(f"  {p:<8}" + "".join(cells) + f"   {ratio:>20}   {used(prof, p):>22}")
    # -P auto against the best fixed count, gridperf's own
    fixed = {r[2]: float(r[3]) for r in rs if r[1] == "gridperf" and r[2] != "auto" and r[3] != "INVALID"}
    auto = [float(r[3]) for r in rs if r[1] == "gridperf" and r[2] == "auto" and r[3] != "INVALID"]
    if fixed and auto:
        best = min(fixed, key=fixed.get)
        print(f"  -P auto {auto[0]:.1f} s against the best fixed -P {best} {fixed[best]:.1f} s: "
              f"{fixed[best] / auto[0]:.2f}x (1.00x is as fast; the target is within 5%, 0.95x)")
    # the transfer alone, next to TCP memory to memory on the same path
    refs = [p for p in dict.fromkeys(r[2] for r in rs)
            if os.path.exists(os.path.join(sys.argv[3], f"{prof}-stream-p{p}.json"))]
    if not refs:
        continue
    print(f"  transfer alone (first block to last acknowledgment) next to `gridperf stream`, the same bytes memory to memory:")
    for p in refs:
        def load(name):
            path = os.path.join(sys.argv[3], f"{prof}-{name}-p{p}.json")
            return json.load(open(path)) if os.path.exists(path) else None
        c, st = load("gridperf"), load("stream")
        if not c or not st:
            print(f"  {p:<8}{'-':>26}")
            continue
        copy_s = c["seconds"]
        ends = [s["receiver"]["last_ns"] for s in st["runs"][0]["streams"]]
        tcp_s = max(ends) / 1e9
        print(f"  {p:<8}   copy {copy_s:>6.1f} s {size * 8 / copy_s / 1e6:>7.1f} Mbit/s"
              f"   stream {tcp_s:>6.1f} s {size * 8 / tcp_s / 1e6:>7.1f} Mbit/s   copy / stream {tcp_s / copy_s:.2f}x")
PY
# the summary kept in git: each try's verdict, its first reason (the raw
# lab-status lines stay in verdicts.txt, which git ignores)
python3 - "$OUT/verdicts.txt" >> "$OUT/run.md" <<'PY'
import sys
print("\n## Each try's verdict\n")
for l in open(sys.argv[1]):
    head, _, rest = l.strip().partition(": ")
    if "INVALID by its own check" in rest:
        v = "INVALID (the copy's own check, exit 4)"
    elif "INVALID since the earlier status: " in rest:
        v = "INVALID: " + rest.split("INVALID since the earlier status: ", 1)[1].split(";")[0][:160]
    else:
        v = "valid"
    print(f"- {head}: {v}")
PY
log "raw times, each gridperf copy's JSON and the servers' logs in $OUT"
