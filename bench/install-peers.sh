#!/usr/bin/env bash
# Install the peer tools that the benches compare gridperf with, from the
# distribution's archive:
#   bench/rtt-peers.sh     sockperf, netpipe-tcp (NPtcp), qperf
#   bench/stream-peers.sh  iperf3, iperf (iperf2), nuttcp
#   bench/copy-polite.sh   iperf3
#   bench/trace-peers.sh   tcptrace, tshark (with editcap, mergecap, capinfos, dumpcap)
#
# Idempotent: does nothing when all of them are installed. Runs `apt-get update`
# only when something is missing. Exits non-zero, with a message saying what
# failed, if it cannot leave every tool installed and on PATH.
set -euo pipefail

PKGS=(sockperf netpipe-tcp qperf iperf3 iperf nuttcp tcptrace tshark)
declare -A BIN=([sockperf]=sockperf [netpipe-tcp]=NPtcp [qperf]=qperf
                [iperf3]=iperf3 [iperf]=iperf [nuttcp]=nuttcp [tcptrace]=tcptrace [tshark]=tshark)

die() { echo "install-peers: error: $*" >&2; exit 1; }
say() { echo "install-peers: $*"; }

installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'
}

command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 ||
    die "this script needs a Debian/Ubuntu system with apt-get and dpkg-query."

missing=()
for p in "${PKGS[@]}"; do
    installed "$p" || missing+=("$p")
done

if [ "${#missing[@]}" -gt 0 ]; then
    SUDO=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 ||
            die "not root and sudo is missing; install as root: apt-get install -y ${missing[*]}"
        SUDO=(sudo)
    fi
    export DEBIAN_FRONTEND=noninteractive
    # Wait for a concurrent apt/dpkg (e.g. an unattended upgrade) rather than failing at once.
    LOCK=(-o DPkg::Lock::Timeout=300)
    say "missing: ${missing[*]}; running apt-get update"
    "${SUDO[@]}" apt-get "${LOCK[@]}" update ||
        die "apt-get update failed (network or apt sources?)."
    say "installing: ${missing[*]}"
    # iperf3's package asks (debconf) whether to start a daemon, wireshark-common
    # whether non-root users may capture; noninteractive takes the defaults (no).
    "${SUDO[@]}" apt-get "${LOCK[@]}" install -y --no-install-recommends "${missing[@]}" ||
        die "apt-get install ${missing[*]} failed. These packages are in Debian/Ubuntu main/universe; check that the archive is reachable."
fi

for p in "${PKGS[@]}"; do
    installed "$p" || die "package $p is still not installed."
    command -v "${BIN[$p]}" >/dev/null 2>&1 || die "package $p is installed but ${BIN[$p]} is not on PATH."
done

say "ok: $(for p in "${PKGS[@]}"; do printf '%s %s; ' "$p" "$(dpkg-query -W -f='${Version}' "$p")"; done)"
