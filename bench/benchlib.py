"""What the Python benches share: reading a work directory's files
(compare.py, stream_compare.py) and the head of a run's summary
(run_header, as bench/lib.sh's). Standard library only."""

import datetime
import os
import platform
import subprocess


def read(path):
    with open(path, "r", errors="replace") as f:
        return f.read()


def load_meta(workdir):
    """meta.tsv of a work directory: one KEY<TAB>VALUE per line."""
    meta = {}
    path = os.path.join(workdir, "meta.tsv")
    if os.path.exists(path):
        for line in read(path).splitlines():
            if "\t" in line:
                k, v = line.split("\t", 1)
                meta[k] = v
    return meta


def run_header(argv):
    """The head of a run's summary, as Markdown lines: the command, when,
    gridperf's commit, the user, and the machine (kernel, CPUs, memory,
    hypervisor, congestion control, steal since boot), as bench/lib.sh's
    run_header writes it for the shell benches."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def out(*cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    rev = out("git", "-C", repo, "rev-parse", "--short", "HEAD") or "unknown"
    if out("git", "-C", repo, "status", "--porcelain", "--untracked-files=no"):
        rev += " (with uncommitted changes)"

    def first(path, prefix):
        try:
            for line in read(path).splitlines():
                if line.startswith(prefix):
                    return line
        except OSError:
            pass
        return ""

    cpu = first("/proc/cpuinfo", "model name").partition(":")[2].strip() or "unknown"
    mem = first("/proc/meminfo", "MemTotal").split()
    gib = f"{int(mem[1]) / 1048576:.0f} GiB" if len(mem) > 1 else "unknown"
    steal = first("/proc/stat", "cpu ").split()
    steal_s = f"{int(steal[8]) / 100:.1f} s" if len(steal) > 8 else "unknown"

    def sysctl(name):
        try:
            return read("/proc/sys/" + name.replace(".", "/")).strip()
        except OSError:
            return "unknown"

    user = out("id", "-un") or str(os.getuid())
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return [
        "## How this run was made",
        "",
        f"- command: `bench/{os.path.basename(argv[0])}{''.join(' ' + a for a in argv[1:])}`",
        f"- started: {now} UTC, gridperf {rev}, as {user}",
        f"- machine: {platform.system()} {platform.release()}, {os.cpu_count()} CPUs ({cpu}), {gib} memory, "
        f"virtualisation: {out('systemd-detect-virt') or 'unknown'}",
        f"- TCP: congestion control {sysctl('net.ipv4.tcp_congestion_control')}, "
        f"qdisc {sysctl('net.core.default_qdisc')}; CPU steal since boot {steal_s}",
        "",
    ]
