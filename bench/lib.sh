# bench/lib.sh: what the peer benches share. Sourced by rtt-peers.sh and
# stream-peers.sh after they set BENCH (their name), REPO, GRIDPERF,
# NO_BUILD, WORKDIR, OUT, QUIET_WAIT and QUIET_PCT; by the copy benches
# (BENCH set) for die, log and install_debs.

die()  { echo "$BENCH: error: $*" >&2; exit 1; }
warn() { echo "$BENCH: warning: $*" >&2; }
log()  { echo "$BENCH: $*" >&2; }

# build_gridperf PEERS: builds the release binary unless it is there (or
# --no-build); PEERS names the tools to run without gridperf if it fails.
build_gridperf() {
    [ -x "$GRIDPERF" ] && return 0
    [ "$NO_BUILD" = 1 ] && die "gridperf binary $GRIDPERF not found (--no-build given)"
    log "building gridperf: cargo build --release -p gridperf"
    (cd "$REPO" && timeout 1800 cargo build --release -p gridperf) ||
        die "building gridperf failed; run peers only with --tools $1"
    [ -x "$GRIDPERF" ] || die "build succeeded but $GRIDPERF is missing; pass --gridperf PATH"
}

# setup_workdir: a fresh work directory (or the one given, if it holds no
# run), absolute OUT and GRIDPERF, and empty MANIFEST and META files in it.
setup_workdir() {
    if [ -z "$WORKDIR" ]; then
        WORKDIR=$(mktemp -d "/tmp/$BENCH.XXXXXX")
    else
        mkdir -p "$WORKDIR"
        [ -e "$WORKDIR/manifest.tsv" ] && die "$WORKDIR already holds a run (manifest.tsv); use a new --workdir"
    fi
    WORKDIR=$(cd "$WORKDIR" && pwd)
    [ -n "$OUT" ] || OUT=$WORKDIR/results.json
    case $OUT in /*) ;; *) OUT=$PWD/$OUT ;; esac
    case $GRIDPERF in /*) ;; *) GRIDPERF=$PWD/$GRIDPERF ;; esac
    MANIFEST=$WORKDIR/manifest.tsv
    META=$WORKDIR/meta.tsv
    : >"$MANIFEST"
    : >"$META"
    log "work directory: $WORKDIR"
}

meta() { printf '%s\t%s\n' "$1" "$2" >>"$META"; }

# run_header FILE: the head of a run's summary, so that a kept summary
# says how it was made and where: the command (this bench and its
# arguments, BENCH_ARGS, which each bench sets first thing), when,
# gridperf's commit, the user, and the machine (kernel, CPUs, memory,
# hypervisor, congestion control, steal since boot). Appends to FILE (a
# run's run.md beside its tables, or its one Markdown file). The raw
# outputs beside it are not kept (.gitignore).
run_header() {
    local file=$1 rev dirty cpu virt
    rev=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
    dirty=$(git -C "$REPO" status --porcelain --untracked-files=no 2>/dev/null | head -1 || true)
    [ -n "$dirty" ] && rev="$rev (with uncommitted changes)"
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1 || true)
    virt=$(systemd-detect-virt 2>/dev/null || true)
    {
        echo "## How this run was made"
        echo
        echo "- command: \`bench/$(basename "$0")${BENCH_ARGS:+ $BENCH_ARGS}\`"
        echo "- started: $(date -u '+%Y-%m-%d %H:%M:%S') UTC, gridperf $rev, as $(id -un)"
        echo "- machine: $(uname -sr), $(nproc) CPUs (${cpu:-unknown}), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) memory, virtualisation: ${virt:-unknown}"
        echo "- TCP: congestion control $(cat /proc/sys/net/ipv4/tcp_congestion_control), qdisc $(cat /proc/sys/net/core/default_qdisc 2>/dev/null || echo unknown), net.core.rmem_max $(cat /proc/sys/net/core/rmem_max) and wmem_max $(cat /proc/sys/net/core/wmem_max) (global; a bench that raises them says so); CPU steal since boot $(awk '/^cpu / {printf "%.1f s", $9/100}' /proc/stat)"
        echo "- memory: $(vm_memory_words)"
        echo
    } >>"$file"
}

# The VM's free page reporting: the memory its kernel frees, handed back
# to the hypervisor (Firecracker, Cloud Hypervisor; this project's
# machine). The kernel's next use of such memory waits on the hypervisor
# to fault it in (docs/lab.md, "A VM that hands back its free memory").
VM_REPORTING=/sys/module/page_reporting/parameters/page_reporting_order
VM_REPORTING_OLD=

# vm_memory_words: what the run header says of it.
vm_memory_words() {
    local o
    if [ ! -r "$VM_REPORTING" ]; then
        echo "no free page reporting (the kernel keeps what it frees)"
        return
    fi
    o=$(cat "$VM_REPORTING")
    if [ -n "$VM_REPORTING_OLD" ]; then
        echo "free page reporting stopped for this run (--vm-keep-memory: page_reporting_order $VM_REPORTING_OLD -> $o, put back after)"
    elif [ "$o" -le 10 ]; then
        echo "the VM hands its free memory back to the hypervisor (free page reporting, page_reporting_order $o)"
    else
        echo "free page reporting present but off (page_reporting_order $o)"
    fi
}

# vm_keep_memory: stops the VM's free page reporting for the bench's run
# (root) and writes WARM_MIB of memory once (a tmpfs file, then removed:
# default half the available memory, at most 12 GiB), so that what the
# runs use was used since it was last handed back. vm_memory_restore,
# from the bench's EXIT trap, puts the setting back.
vm_keep_memory() {
    local mib
    if [ ! -w "$VM_REPORTING" ]; then
        warn "--vm-keep-memory: no free page reporting to stop here (or not root)"
        return 0
    fi
    VM_REPORTING_OLD=$(cat "$VM_REPORTING")
    echo 11 >"$VM_REPORTING"
    mib=${WARM_MIB:-$(awk '/MemAvailable/ {m = int($2 / 2048); print (m > 12288 ? 12288 : m)}' /proc/meminfo)}
    log "free page reporting stopped (page_reporting_order $VM_REPORTING_OLD -> 11); writing $mib MiB once"
    head -c "${mib}M" /dev/zero >/dev/shm/gridperf-bench-warm.$$ 2>/dev/null || true
    rm -f /dev/shm/gridperf-bench-warm.$$
}

vm_memory_restore() {
    if [ -n "$VM_REPORTING_OLD" ]; then
        echo "$VM_REPORTING_OLD" >"$VM_REPORTING" || true
        log "free page reporting put back (page_reporting_order $VM_REPORTING_OLD)"
        VM_REPORTING_OLD=
    fi
}

# wait_listen PROTO PORT PID: until a socket is bound to PORT, the process
# PID died, or 10 s passed.
wait_listen() {
    local proto=$1 port=$2 pid=$3 flag i
    [ "$proto" = tcp ] && flag=-Hltn || flag=-Hlun
    for i in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || return 1
        [ -n "$(ss $flag "( sport = :$port )" 2>/dev/null)" ] && return 0
        sleep 0.1
    done
    return 1
}

# quiet: wait (at most QUIET_WAIT s) until every CPU is below QUIET_PCT% busy
# over a 0.5 s window; sets BUSY_BEFORE to the last window's per-CPU figures.
# CPUs listed in QUIET_SKIP (e.g. "1", where a spinning server of ours runs)
# are reported but not waited for.
QUIET_SKIP=""
quiet() {
    BUSY_BEFORE=$(python3 -c '
import sys, time
wait, pct = float(sys.argv[1]), float(sys.argv[2])
skip = {"cpu" + c for c in sys.argv[3].split(",") if c}
def snap():
    d = {}
    with open("/proc/stat") as f:
        for line in f:
            x = line.split()
            if x[0].startswith("cpu") and x[0] != "cpu":
                v = list(map(int, x[1:]))
                d[x[0]] = (sum(v), v[3] + v[4])
    return d
t0 = time.time()
while True:
    a = snap(); time.sleep(0.5); b = snap()
    busy = {k: 100.0 * (1 - (b[k][1] - a[k][1]) / max(1, b[k][0] - a[k][0])) for k in a}
    worst = max([v for k, v in busy.items() if k not in skip] or [0.0])
    if worst < pct or time.time() - t0 >= wait:
        break
s = " ".join("%s=%.0f%%%s" % (k, busy[k], "(ours)" if k in skip else "") for k in sorted(busy))
if worst >= pct:
    s += " (still busy after %gs)" % wait
print(s)
' "$QUIET_WAIT" "$QUIET_PCT" "$QUIET_SKIP")
    case $BUSY_BEFORE in *"still busy"*) warn "CPUs busy before this run: $BUSY_BEFORE" ;; esac
}

# install_debs PKG...: installs the Debian packages that are missing (root),
# with no service of theirs started by the install (nginx's on port 80):
# a policy-rc.d that says no, made for the install and removed after, when
# the machine has none of its own.
install_debs() {
    local need=() p made=
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || need+=("$p")
    done
    [ "${#need[@]}" -eq 0 ] && return 0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && made=1
    fi
    log "installing ${need[*]}"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -o DPkg::Lock::Timeout=300 "${need[@]}" >/dev/null; then
        [ -n "$made" ] && rm -f /usr/sbin/policy-rc.d
        die "could not install ${need[*]}"
    fi
    [ -n "$made" ] && rm -f /usr/sbin/policy-rc.d
    return 0
}

# stop_started: ends the processes this bench started (their ids in the
# PIDS array) and waits for them; the copy and trace benches call it on exit.
stop_started() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}
