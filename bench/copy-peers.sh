#!/usr/bin/env bash
# bench/copy-peers.sh: gridperf copy next to GridFTP (globus-url-copy to a
# globus-gridftp-server), XRootD (xrdcp to an xrootd), rsync (to an rsync
# daemon) and aria2 (aria2c downloading from an nginx, the one HTTP peer:
# a pull, where the others push), in one run, on loopback, tmpfs to tmpfs:
# one file of --size random bytes moved to or from a server each tool
# starts here, with 1 and 4 streams (rsync has one), --repeat rounds with
# the tools taking turns. gridperf runs twice: plain, and with --encrypt
# (gridperf-enc), whose cost is printed as a ratio. GridFTP runs twice too:
# plain (nothing verified) and with -verify-checksum (gridftp-verify: MD5 of
# both files after the transfer), the peer that checks what gridperf checks.
#
#   bench/copy-peers.sh [--size 2G] [--repeat 3] [--gridperf PATH] [--out DIR]
#
# Prints, per stream count, each tool's median wall time of the client
# command (connection, transfer, and for gridperf the verification of every
# block and the whole file's BLAKE3), its rate, the range over the rounds
# (writes into tmpfs vary by up to 2x from one copy to the next on a VM
# whose memory the host reclaims: more rounds when the ranges overlap), and
# gridperf's rate over the best peer's. Every copy is checked with cmp. Needs root (the peers' servers
# run as nobody where they must not run as root) and Debian's packages:
# globus-gridftp-server-progs globus-gass-copy-progs xrootd-server
# xrootd-client rsync nginx-light aria2 (installed if missing, with no
# service started by the install). Ports 5811-5815 on 127.0.0.1.
BENCH_ARGS="$*" # the command line, for run_header (bench/lib.sh)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
GRIDPERF=$REPO/target/release/gridperf
SIZE=2G
REPEAT=3
OUT=$REPO/bench/results/copy-peers-$(date +%Y%m%d-%H%M%S)
while [ $# -gt 0 ]; do
    case "$1" in
        --size) SIZE=$2; shift 2 ;;
        --repeat) REPEAT=$2; shift 2 ;;
        --gridperf) GRIDPERF=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        *) echo "copy-peers: unknown argument $1" >&2; exit 2 ;;
    esac
done
BENCH=copy-peers
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"
[ "$(id -u)" -eq 0 ] || die "needs root (the servers' users, the packages)"
install_debs globus-gridftp-server-progs globus-gass-copy-progs xrootd-server xrootd-client rsync nginx-light aria2
[ -x "$GRIDPERF" ] || (cd "$REPO" && cargo build --release -p gridperf)
mkdir -p "$OUT"
run_header "$OUT/run.md"
WORK=$(mktemp -d /dev/shm/gridperf-copy-peers.XXXXXX)
chmod 755 "$WORK"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    cp "$WORK"/logs/* "$OUT"/ 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
bytes=$(numfmt --from=iec "$SIZE")
head -c "$bytes" /dev/urandom > "$WORK/file.dat"
chmod 644 "$WORK/file.dat"
for d in gridftp xrootd rsync gridperf aria2 nginx logs; do mkdir -p "$WORK/$d"; done
# the servers that run as nobody write there, and their logs
chmod 777 "$WORK/gridftp" "$WORK/xrootd"
chmod 1777 "$WORK/logs"

# the servers, each started here and ended by its pid
globus-gridftp-server -aa -anonymous-user nobody -p 5811 -control-interface 127.0.0.1 \
    -data-interface 127.0.0.1 -d error -l "$WORK/logs/gridftp.log" > "$OUT/gridftp.out" 2>&1 &
PIDS+=($!)
printf 'all.export %s\nxrd.port 5812\n' "$WORK" > "$WORK/xrd.cfg"
xrootd -c "$WORK/xrd.cfg" -l "$WORK/logs/xrootd.log" -R nobody > "$OUT/xrootd.out" 2>&1 &
PIDS+=($!)
printf 'port = 5813\naddress = 127.0.0.1\nuse chroot = no\npid file = %s/rsyncd.pid\n[out]\n path = %s/rsync\n read only = no\n uid = root\n gid = root\n' \
    "$WORK" "$WORK" > "$WORK/rsyncd.conf"
rsync --daemon --no-detach --config="$WORK/rsyncd.conf" > "$OUT/rsyncd.out" 2>&1 &
PIDS+=($!)
"$GRIDPERF" serve --bind 127.0.0.1 --port 5814 --root "$WORK/gridperf" > "$OUT/gridperf-serve.out" 2>&1 &
PIDS+=($!)
# nginx serves the file to aria2c (HTTP ranges, sendfile), as nobody
cat > "$WORK/nginx.conf" <<NGINX
daemon off;
user nobody nogroup;
worker_processes 1;
pid $WORK/nginx/nginx.pid;
error_log $WORK/logs/nginx.log error;
events { worker_connections 64; }
http {
    access_log off;
    sendfile on;
    client_body_temp_path $WORK/nginx;
    proxy_temp_path $WORK/nginx;
    server { listen 127.0.0.1:5815; root $WORK; }
}
NGINX
nginx -c "$WORK/nginx.conf" > "$OUT/nginx.out" 2>&1 &
PIDS+=($!)
for port in 5811 5812 5813 5814 5815; do
    for _ in $(seq 100); do
        (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break
        sleep 0.1
    done
    (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null || die "nothing listens on port $port (see $OUT)"
done

# one copy: its wall time in seconds on stdout; the copy checked, then removed
one() {
    local tool=$1 p=$2 dest t0 t1
    case "$tool" in
        gridftp | gridftp-verify) dest=$WORK/gridftp/file.dat ;;
        xrootd) dest=$WORK/xrootd/file.dat ;;
        rsync) dest=$WORK/rsync/file.dat ;;
        gridperf | gridperf-enc) dest=$WORK/gridperf/file.dat ;;
        aria2) dest=$WORK/aria2/file.dat ;;
    esac
    rm -f "$dest"
    t0=$(date +%s.%N)
    case "$tool" in
        gridftp) timeout 600 globus-url-copy -fast -p "$p" -tcp-bs 4194304 "file://$WORK/file.dat" "ftp://127.0.0.1:5811$dest" ;;
        gridftp-verify) timeout 600 globus-url-copy -fast -verify-checksum -p "$p" -tcp-bs 4194304 "file://$WORK/file.dat" \
            "ftp://127.0.0.1:5811$dest" ;;
        xrootd) timeout 600 xrdcp -s -f -S "$p" "$WORK/file.dat" "root://127.0.0.1:5812/$dest" ;;
        rsync) timeout 600 rsync --whole-file "$WORK/file.dat" rsync://127.0.0.1:5813/out/ ;;
        gridperf) timeout 600 "$GRIDPERF" copy "$WORK/file.dat" 127.0.0.1: --port 5814 -P "$p" --no-store --json \
            > "$OUT/gridperf-p$p-$(date +%s%N).json" ;;
        gridperf-enc) timeout 600 "$GRIDPERF" copy "$WORK/file.dat" 127.0.0.1: --port 5814 -P "$p" --encrypt \
            --no-store --json > "$OUT/gridperf-enc-p$p-$(date +%s%N).json" ;;
        aria2) timeout 600 aria2c -x "$p" -s "$p" -k 1M --file-allocation=falloc --allow-overwrite=true \
            --console-log-level=error --summary-interval=0 --download-result=hide -d "$WORK/aria2" -o file.dat \
            http://127.0.0.1:5815/file.dat ;;
    esac >> "$OUT/clients.log" 2>&1 || die "$tool -P $p failed (see $OUT/clients.log)"
    t1=$(date +%s.%N)
    cmp -s "$WORK/file.dat" "$dest" || die "$tool -P $p: the copy differs"
    rm -f "$dest"
    echo "$t0 $t1" | awk '{ printf "%.3f\n", $2 - $1 }'
}

: > "$OUT/times.txt"
for r in $(seq "$REPEAT"); do
    for p in 1 4; do
        tools=(gridperf gridperf-enc gridftp gridftp-verify xrootd rsync aria2)
        [ "$p" -eq 4 ] && tools=(gridperf gridperf-enc gridftp gridftp-verify xrootd aria2)
        # the tools take turns, starting one further each round
        n=${#tools[@]}
        for k in $(seq 0 $((n - 1))); do
            t=${tools[$(((k + r) % n))]}
            echo "$t $p $(one "$t" "$p") $r" | tee -a "$OUT/times.txt" >&2
        done
    done
done
python3 - "$OUT/times.txt" "$bytes" <<'PY' | tee "$OUT/table.txt"
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
size = int(sys.argv[2])
for p in ("1", "4"):
    runs = {}
    by_round = {}
    for t, q, s, *r in rows:
        if q == p:
            runs.setdefault(t, []).append(float(s))
            by_round.setdefault(r[0] if r else "?", {})[t] = float(s)
    med = {t: statistics.median(v) for t, v in runs.items()}
    rounds = sum(1 for t, q, *_ in rows if q == p and t == "gridperf")
    print(f"{p} stream{'s' if p != '1' else ''}: median wall time of {rounds} rounds, {size / 2**30:g} GiB tmpfs to tmpfs on loopback")
    for t, s in sorted(med.items(), key=lambda x: x[1]):
        lo, hi = min(runs[t]), max(runs[t])
        print(f"  {t:<13} {s:7.2f} s  {size * 8 / s / 1e9:6.2f} Gbit/s   (rounds {lo:.2f}-{hi:.2f} s)")
    peers = [s for t, s in med.items() if not t.startswith("gridperf")]
    if "gridperf" in med and peers:
        print(f"  gridperf / best peer: {min(peers) / med['gridperf']:.2f}x")
    # within a round the tools run minutes apart at most: the ratio of each
    # round's best peer to its gridperf copy, over the rounds (the VM's
    # tmpfs writes drift by 2x from one minute to the next)
    for label, keep in (("best peer", lambda t: True), ("best verifying peer", lambda t: t.endswith("-verify"))):
        paired = sorted(
            min(v for t, v in rr.items() if not t.startswith("gridperf") and keep(t)) / rr["gridperf"]
            for rr in by_round.values()
            if "gridperf" in rr and any(not t.startswith("gridperf") and keep(t) for t in rr)
        )
        if paired:
            print(f"  gridperf / {label}, round by round: median {statistics.median(paired):.2f}x, "
                  f"range {paired[0]:.2f}-{paired[-1]:.2f}x over {len(paired)} rounds")
    if "gridperf-enc" in med and peers:
        print(f"  gridperf --encrypt / best peer: {min(peers) / med['gridperf-enc']:.2f}x")
    if "gridperf" in med and "gridperf-enc" in med:
        print(f"  --encrypt keeps {med['gridperf'] / med['gridperf-enc']:.0%} of the plain copy's rate")
PY
echo "copy-peers: raw times and logs in $OUT" >&2
