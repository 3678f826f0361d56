#!/usr/bin/env python3
"""bench/promises_demo.py: each broken promise of issue 31, reproduced the
way it was found, against two gridperf binaries side by side (an older
build and this one), as a table of what each did.

    bench/promises_demo.py --old /path/to/old/gridperf [--new target/release/gridperf]

Runs on loopback only; every agent it starts it stops. Some reproductions
need root (the full disk: a tmpfs in a mount namespace), or prlimit and
unshare (util-linux). Standard library only."""

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Agent:
    def __init__(self, exe, args, prefix=None, bind="127.0.0.1"):
        self.port = free_port()
        cmd = (prefix or []) + [exe, "serve", "--bind", bind, "--port", str(self.port)] + args
        self.p = subprocess.Popen(cmd, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        deadline = time.time() + 5
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("agent did not listen: " + " ".join(cmd))

    def stop(self):
        self.p.kill()
        self.p.wait()


def run(cmd, timeout=120, env=None):
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=timeout, env=env)
        return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace"), time.time() - t0
    except subprocess.TimeoutExpired:
        return None, "", "timed out", time.time() - t0


def frame(obj):
    b = json.dumps(obj).encode()
    return struct.pack(">I", len(b)) + b


def read_frame(s):
    n = struct.unpack(">I", s.recv(4, socket.MSG_WAITALL))[0]
    return json.loads(s.recv(n, socket.MSG_WAITALL))


def version_of(exe):
    # the protocol version an agent speaks, from its own listening line
    port = free_port()
    p = subprocess.Popen([exe, "serve", "--bind", "127.0.0.1", "--port", str(port)], stderr=subprocess.PIPE)
    line = p.stderr.readline().decode()
    p.kill()
    p.wait()
    return int(line.split("protocol ")[1].split(",")[0])


def data(n, seed):
    import random
    r = random.Random(seed)
    return bytes(r.getrandbits(8) for _ in range(min(n, 1 << 16))) * (n // (1 << 16) + 1)


def b3(path):
    import hashlib
    return None  # not in the standard library: compared by content instead


# --- the reproductions: each returns a short figure -------------------------------------------------


def mixed_push(exe, work):
    """Two clients push one path at once (--max-tests 2), 3 rounds of 64 MiB: rounds whose file in place is neither source."""
    root = os.path.join(work, "root")
    os.makedirs(root)
    a = Agent(exe, ["--root", root, "--max-tests", "2"])
    mixed = 0
    claims = 0
    try:
        for rnd in range(3):
            srcs = []
            for k in range(2):
                d = os.path.join(work, f"s{rnd}{k}")
                os.makedirs(d)
                p = os.path.join(d, "same.dat")
                with open(p, "wb") as f:
                    f.write(data(64 << 20, rnd * 10 + k)[: 64 << 20])
                srcs.append(p)
            procs = [subprocess.Popen([exe, "copy", p, "127.0.0.1:same.dat", "--port", str(a.port), "--force",
                                       "-P", "4", "--block", "1M", "--no-store"], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL) for p in srcs]
            codes = [p.wait() for p in procs]
            placed = open(os.path.join(root, "same.dat"), "rb").read()
            ones = [open(p, "rb").read() for p in srcs]
            if placed not in ones:
                mixed += 1
                claims += sum(1 for c in codes if c == 0)
            os.remove(os.path.join(root, "same.dat"))
    finally:
        a.stop()
    return f"{mixed} of 3 rounds mixed ({claims} exits 0 on a mixed file)"


def same_name(exe, work):
    """copy a/x b/x HOST:dst/: the exit, and whether dst/x is either source."""
    root = os.path.join(work, "root")
    os.makedirs(root)
    for k, n in (("a", 1 << 20), ("b", 8 << 20)):
        os.makedirs(os.path.join(work, k))
        with open(os.path.join(work, k, "x"), "wb") as f:
            f.write(data(n, ord(k))[:n])
    a = Agent(exe, ["--root", root])
    try:
        code, out, err, _ = run([exe, "copy", os.path.join(work, "a/x"), os.path.join(work, "b/x"), "127.0.0.1:dst/",
                                 "--port", str(a.port), "--no-store"])
    finally:
        a.stop()
    p = os.path.join(root, "dst/x")
    if not os.path.exists(p):
        return f"exit {code}, nothing made"
    placed = open(p, "rb").read()
    srcs = [open(os.path.join(work, k, "x"), "rb").read() for k in "ab"]
    return f"exit {code}, dst/x {'is a source' if placed in srcs else 'is a MIX'}"


def metrics_panic(exe, work):
    """16 requests with X-Prometheus-Scrape-Timeout-Seconds: 2e19, then /metrics."""
    mport = free_port()
    a = Agent(exe, ["--metrics", f"127.0.0.1:{mport}"])
    time.sleep(0.3)
    try:
        for _ in range(16):
            s = socket.create_connection(("127.0.0.1", mport), timeout=5)
            s.sendall(b"GET /probe?target=x&module=y HTTP/1.1\r\nX-Prometheus-Scrape-Timeout-Seconds: 2e19\r\n\r\n")
            try:
                s.recv(4096)
            except OSError:
                pass
            s.close()
        s = socket.create_connection(("127.0.0.1", mport), timeout=5)
        s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
        got = b""
        while b"\r\n" not in got:
            more = s.recv(64)
            if not more:
                break
            got += more
        status = got.split(b" ")[1].decode() if b" " in got else "nothing"
        s.close()
    finally:
        a.stop()
    return f"/metrics answers {status}"


def copy_memory(exe, work):
    """A push of streams 1, connections 32, block 16M under --max-test-memory 64M: accepted, and the agent's threads."""
    root = os.path.join(work, "root")
    os.makedirs(root)
    a = Agent(exe, ["--root", root, "--max-test-memory", "64M"])
    v = version_of(exe)
    try:
        base = len(os.listdir(f"/proc/{a.p.pid}/task"))
        s = socket.create_connection(("127.0.0.1", a.port), timeout=5)
        s.sendall(frame({"type": "hello", "magic": "gridperf", "version": v, "software": "demo"}))
        read_frame(s)
        spec = {"direction": "push", "files": 1, "streams": 1, "block": 16 << 20, "window": None, "congestion": None,
                "pacing_bps": None, "resume": False, "force": False, "connections": 32}
        s.sendall(frame({"type": "request", "queue_ms": 0, "test": {"kind": "copy", **spec}}))
        ready = read_frame(s)
        if ready.get("type") != "ready":
            return "refused: " + ready.get("message", "")[:60]
        f = {"path": "big.dat", "size": 256 << 20, "mtime_ns": 0}
        s.sendall(frame({"type": "copy-files", "files": [f]}))
        read_frame(s)
        s.sendall(frame({"type": "stream-go"}))
        conns = []
        for k in range(32):
            c = socket.socket()
            c.settimeout(2)
            try:
                c.connect(("127.0.0.1", ready["tcp_port"]))
                c.sendall(struct.pack(">Q", ready["token"]) + bytes([6]) + struct.pack(">I", k))
                conns.append(c)
            except OSError:
                c.close()
        time.sleep(1)
        threads = len(os.listdir(f"/proc/{a.p.pid}/task"))
        for c in conns:
            c.close()
        s.close()
    finally:
        a.stop()
    return f"accepted; {threads - base} threads more with 32 connections open"


def key_downgrade(exe, work):
    """rtt with --key against an agent that asks for no key: the exit."""
    home = os.path.join(work, "home")
    os.makedirs(home)
    key = os.path.join(work, "alice.key")
    run([exe, "keygen", "alice", "-o", key])
    a = Agent(exe, [])
    try:
        code, _, err, _ = run([exe, "rtt", "127.0.0.1", "-p", str(a.port), "--key", key, "--proto", "tcp", "--sizes",
                               "64", "-n", "5", "--no-store"], env={**os.environ, "HOME": home})
    finally:
        a.stop()
    return f"exit {code}" + (" (refused)" if code == 5 else " (accepted)")


def descriptors(exe, work):
    """A push, then a pull, of 2,000 files under prlimit --nofile=1024 (both ends): files in place."""
    src = os.path.join(work, "src/many")
    os.makedirs(src)
    for k in range(2000):
        with open(os.path.join(src, f"f{k:04}"), "wb") as f:
            f.write(bytes([k % 251]) * (100 + k))
    root = os.path.join(work, "root")
    os.makedirs(root)
    lim = ["prlimit", "--nofile=1024:1024"]
    a = Agent(exe, ["--root", root], prefix=lim)
    try:
        run(lim + [exe, "copy", src, "127.0.0.1:in/", "--port", str(a.port), "--no-store"], timeout=300)
        pushed = len(os.listdir(os.path.join(root, "in/many"))) if os.path.isdir(os.path.join(root, "in/many")) else 0
        pushed = sum(1 for n in os.listdir(os.path.join(root, "in/many")) if not n.startswith(".")) if pushed else 0
        back = os.path.join(work, "back")
        run(lim + [exe, "copy", "127.0.0.1:in/many", back + "/", "--port", str(a.port), "--no-store"], timeout=300)
        d = os.path.join(back, "many")
        pulled = sum(1 for n in os.listdir(d) if not n.startswith(".")) if os.path.isdir(d) else 0
    finally:
        a.stop()
    return f"pushed {pushed} of 2000, pulled {pulled} of 2000"


def pscheduler_dest(exe, work):
    """disk-to-disk with dest an existing file outside any tool directory: what became of it."""
    root = os.path.join(work, "root")
    os.makedirs(root)
    with open(os.path.join(root, "a.dat"), "wb") as f:
        f.write(b"data" * 1000)
    precious = os.path.join(work, "site/precious.conf")
    os.makedirs(os.path.dirname(precious))
    with open(precious, "w") as f:
        f.write("keep me")
    conf = os.path.join(work, "gridperf.conf")
    with open(conf, "w") as f:
        json.dump({"dest-root": os.path.join(work, "tool")}, f)
    a = Agent(exe, ["--root", root])
    try:
        spec = {"source": f"gridperf://127.0.0.1:{a.port}/a.dat", "dest": precious, "cleanup": True}
        inp = json.dumps({"participant": 0, "participant-data": [{}], "test": {"type": "disk-to-disk", "spec": spec}})
        p = subprocess.run([exe, "pscheduler", "run"], input=inp.encode(), capture_output=True, timeout=60,
                           env={**os.environ, "GRIDPERF_PSCHEDULER_CONF": conf})
    finally:
        a.stop()
    if not os.path.exists(precious):
        return f"exit {p.returncode}: precious.conf DELETED"
    content = open(precious).read()
    return f"exit {p.returncode}: precious.conf {'kept' if content == 'keep me' else 'OVERWRITTEN'}"


def pcap_long(path, intervals):
    """A capture of one connection: a data segment and its ACK every 100 ms."""
    def tcp(src, dst, sp, dp, seq, ack, flags, n):
        ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 40 + n, 0, 0x4000, 64, 6, 0, bytes(src), bytes(dst))
        t = struct.pack(">HHIIBBHHH", sp, dp, seq & 0xffffffff, ack & 0xffffffff, 5 << 4, flags, 65535, 0, 0)
        return ip + t + b"\xab" * n
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, 65535, 101))
        def pkt(t, b):
            f.write(struct.pack("<IIII", int(t), int((t % 1) * 1e6), len(b), len(b)) + b)
        a, b = [10, 0, 0, 1], [10, 0, 0, 2]
        pkt(0.0, tcp(a, b, 40000, 5201, 1000, 0, 0x02, 0))
        pkt(0.001, tcp(b, a, 5201, 40000, 5000, 1001, 0x12, 0))
        pkt(0.002, tcp(a, b, 40000, 5201, 1001, 5001, 0x10, 0))
        seq = 1001
        for k in range(intervals):
            t = 0.01 + k * 0.1
            pkt(t, tcp(a, b, 40000, 5201, seq, 5001, 0x18, 100))
            seq += 100
            pkt(t + 0.001, tcp(b, a, 5201, 40000, 5001, seq, 0x10, 0))


def trace_long(exe, work, intervals):
    path = os.path.join(work, "long.pcap")
    pcap_long(path, intervals)
    t0 = time.time()
    p = subprocess.Popen([exe, "trace", path, "--no-store", "--json"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    # its peak resident memory, read while it runs (a rusage would count the forking Python's)
    hwm = 0
    while p.poll() is None:
        try:
            for line in open(f"/proc/{p.pid}/status"):
                if line.startswith("VmHWM"):
                    hwm = max(hwm, int(line.split()[1]))
        except OSError:
            pass
        time.sleep(0.02)
    return f"{time.time() - t0:.1f} s, {hwm / 1024:.0f} MB at most"


def hardlink(exe, work):
    """A hard link to a file outside the root, planted as a partial file: is the outside file written?"""
    root = os.path.join(work, "root")
    os.makedirs(root)
    victim = os.path.join(work, "victim")
    with open(victim, "w") as f:
        f.write("victim")
    os.link(victim, os.path.join(root, ".hl.bin.gridperf-partial"))
    src = os.path.join(work, "hl.bin")
    with open(src, "wb") as f:
        f.write(b"x" * 300000)
    a = Agent(exe, ["--root", root])
    try:
        code, _, _, _ = run([exe, "copy", src, "127.0.0.1:hl.bin", "--port", str(a.port), "--no-store"])
    finally:
        a.stop()
    return f"exit {code}, the file outside {'untouched' if open(victim).read() == 'victim' else 'WRITTEN'}"


def lockout(exe, work):
    """8 silent control connections from each of 9 loopback addresses, then an rtt from 127.0.0.1."""
    a = Agent(exe, [])
    socks = []
    try:
        for k in range(2, 11):
            for _ in range(8):
                s = socket.socket()
                s.bind((f"127.0.0.{k}", 0))
                try:
                    s.connect(("127.0.0.1", a.port))
                    socks.append(s)
                except OSError:
                    s.close()
        time.sleep(0.7)
        code, _, err, _ = run([exe, "rtt", "127.0.0.1", "-p", str(a.port), "--proto", "tcp", "--sizes", "64",
                               "-n", "5", "--no-store"])
    finally:
        for s in socks:
            s.close()
        a.stop()
    return f"rtt exit {code}" + (" (served)" if code == 0 else " (refused)")


def auth_flood(exe, work):
    """Wrong keys from one address for 2 s, as fast as answered: tries that got a challenge, and the log's lines."""
    auth = os.path.join(work, "authorized")
    key = os.path.join(work, "alice.key")
    out = run([exe, "keygen", "alice", "-o", key])[1]
    with open(auth, "w") as f:
        f.write(out)
    os.chmod(auth, 0o600)
    port = free_port()
    log = open(os.path.join(work, "agent.log"), "w")
    p = subprocess.Popen([exe, "serve", "--bind", "127.0.0.1", "--port", str(port), "--auth", auth], stderr=log)
    time.sleep(0.5)
    v = version_of(exe)
    tries = 0
    t_end = time.time() + 2
    cpu0 = sum(os.times()[:2])
    while time.time() < t_end:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            s.sendall(frame({"type": "hello", "magic": "gridperf", "version": v, "software": "demo"}))
            w = read_frame(s)
            if w.get("challenge"):
                tries += 1
                s.sendall(frame({"type": "auth", "key": "alice", "nonce": "00" * 32, "proof": "11" * 32}))
                read_frame(s)
            s.close()
        except (OSError, struct.error, json.JSONDecodeError):
            pass
    with open(f"/proc/{p.pid}/stat") as f:
        st = f.read().split()
    agent_cpu = (int(st[13]) + int(st[14])) / os.sysconf("SC_CLK_TCK")
    p.kill()
    p.wait()
    log.close()
    lines = sum(1 for _ in open(os.path.join(work, "agent.log")))
    return f"{tries} challenged in 2 s, {lines} log lines, agent CPU {agent_cpu:.2f} s"


def pg_hang(exe, work):
    """--db against a listener that accepts and never answers, with connect_timeout=2: the wall time."""
    l = socket.socket()
    l.bind(("127.0.0.1", 0))
    l.listen(4)
    port = l.getsockname()[1]
    held = []
    def accept():
        try:
            while True:
                held.append(l.accept()[0])
        except OSError:
            pass
    threading.Thread(target=accept, daemon=True).start()
    code, _, err, took = run([exe, "runs", "list", "--db", f"postgres://u@127.0.0.1:{port}/x?connect_timeout=2"],
                             timeout=30)
    l.close()
    return f"{'exit ' + str(code) if code is not None else 'still waiting'} after {took:.1f} s"


def pscheduler_panic(exe, work):
    inp = json.dumps({"participant": 0, "participant-data": [{}],
                      "test": {"type": "throughput", "spec": {"dest": "127.0.0.1", "duration": "PT100000000000000000000S"}}})
    p = subprocess.run([exe, "pscheduler", "run"], input=inp.encode(), capture_output=True, timeout=30)
    return f"exit {p.returncode}"


def declared(exe, work):
    """A push that declares 2 GiB and sends nothing: the partial file left, 3 s after the client left."""
    root = os.path.join(work, "root")
    os.makedirs(root)
    a = Agent(exe, ["--root", root])
    v = version_of(exe)
    try:
        s = socket.create_connection(("127.0.0.1", a.port), timeout=5)
        s.sendall(frame({"type": "hello", "magic": "gridperf", "version": v, "software": "demo"}))
        read_frame(s)
        spec = {"direction": "push", "files": 1, "streams": 1, "block": 1 << 20, "window": None, "congestion": None,
                "pacing_bps": None, "resume": False, "force": False}
        s.sendall(frame({"type": "request", "queue_ms": 0, "test": {"kind": "copy", **spec}}))
        read_frame(s)
        s.sendall(frame({"type": "copy-files", "files": [{"path": "big.dat", "size": 2 << 30, "mtime_ns": 0}]}))
        read_frame(s)
        s.close()
        time.sleep(3)
        left = [n for n in os.listdir(root) if "gridperf-partial" in n]
        size = sum(os.stat(os.path.join(root, n)).st_size for n in left)
    finally:
        a.stop()
    return f"{len(left)} partial files left ({size >> 20} MiB)"


def odd_pulls(exe, work):
    """A pull of a symbolic link, and a push of /proc/self/status: exits and bytes."""
    root = os.path.join(work, "root")
    os.makedirs(root)
    with open(os.path.join(root, "real"), "w") as f:
        f.write("x" * 1000)
    os.symlink("real", os.path.join(root, "link"))
    a = Agent(exe, ["--root", root])
    try:
        c1 = run([exe, "copy", "127.0.0.1:link", os.path.join(work, "here") + "/", "--port", str(a.port),
                  "--no-store"])[0]
    finally:
        a.stop()
    c2 = run([exe, "copy", "/proc/self/status", os.path.join(work, "proc") + "/", "--no-store"])[0]
    got = os.path.join(work, "proc/status")
    n = os.path.getsize(got) if os.path.exists(got) else None
    return f"link: exit {c1}; /proc: exit {c2}, {n if n is not None else 'no'} bytes copied"


def fanout_memory(exe, work):
    """An agent's resident memory after fanout tests of 16 MiB messages (3 consumers), idle."""
    a = Agent(exe, ["--max-tests", "4"])
    try:
        ag = ",".join([f"127.0.0.1:{a.port}"] * 3)
        run([exe, "fanout", "--agents", ag, "--nodes", "3", "--size", "16M", "--messages", "8", "--repeat", "2",
             "--variant", "all", "--no-store"], timeout=300)
        time.sleep(1)
        rss = [l for l in open(f"/proc/{a.p.pid}/status") if l.startswith("VmRSS")][0].split()[1]
    finally:
        a.stop()
    return f"{int(rss) // 1024} MB resident"


def pacing(exe, work):
    """stream --pacing 1M -t 3: broken streams, and the exit."""
    code, out, err, took = run([exe, "stream", "--pacing", "1M", "-t", "3", "--no-store", "--json"], timeout=120)
    try:
        v = json.loads(out)
        broken = sum(1 for s in v["runs"][0]["streams"] if s.get("broken"))
    except (ValueError, KeyError, IndexError):
        broken = "?"
    return f"{broken} broken, exit {code}, {took:.1f} s"


def enospc(exe, work):
    """A push of 2 x 3 MiB onto a 4 MiB tmpfs: how long until it ended, and the reason given."""
    if os.geteuid() != 0:
        return "needs root"
    src = os.path.join(work, "src")
    os.makedirs(src)
    for k in "ab":
        with open(os.path.join(src, k + ".dat"), "wb") as f:
            f.write(data(3 << 20, ord(k))[: 3 << 20])
    m = os.path.join(work, "small")
    os.makedirs(m)
    script = f"mount -t tmpfs -o size=4m demo {m} && {exe} copy {src}/ {m}/ -P 2 --block 256K --no-store"
    code, out, err, took = run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], timeout=120)
    why = "disk is full" if "disk is full" in out + err else ("stopped acknowledging" if "acknowledging" in out + err
                                                              else (out + err).strip().splitlines()[-1][:60])
    return f"{took:.1f} s, exit {code}: {why}"


DEMOS = [
    ("1 two clients push one path", mixed_push),
    ("1 copy a/x b/x HOST:dst/", same_name),
    ("2 /metrics after 16 x 2e19", metrics_panic),
    ("3 copy of 32 x 16 MiB connections under 64M", copy_memory),
    ("4 --key against an agent without keys", key_downgrade),
    ("5 2,000 files under nofile 1024", descriptors),
    ("6 pScheduler dest = an existing file", pscheduler_dest),
    ("7 trace, 1e5 intervals", lambda e, w: trace_long(e, w, 100_000)),
    ("7 trace, 1e6 intervals", lambda e, w: trace_long(e, w, 1_000_000)),
    ("8 a full disk mid-copy", enospc),
    ("9 a planted hard link", hardlink),
    ("10 72 silent connections, 9 addresses", lockout),
    ("10 failed authentications for 2 s", auth_flood),
    ("11 --db to a silent server", pg_hang),
    ("12 pscheduler run PT1e20S", pscheduler_panic),
    ("12 2 GiB declared, nothing sent", declared),
    ("12 a pulled link; /proc", odd_pulls),
    ("12 idle agent after 16 MiB fanout", fanout_memory),
    ("12 stream --pacing 1M", pacing),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="the older gridperf binary")
    ap.add_argument("--new", default=os.path.join(os.path.dirname(__file__), "../target/release/gridperf"))
    ap.add_argument("--only", default="", help="run only the demos whose name contains this")
    a = ap.parse_args()
    exes = [("before", os.path.abspath(a.old)), ("after", os.path.abspath(a.new))]
    print("| defect | before | after |")
    print("|---|---|---|")
    for name, fn in DEMOS:
        if a.only and a.only not in name:
            continue
        cells = []
        for _, exe in exes:
            work = tempfile.mkdtemp(prefix="gridperf-demo-")
            try:
                cells.append(fn(exe, work))
            except Exception as e:  # a reproduction that breaks says so in its cell
                cells.append(f"error: {e}"[:80])
            finally:
                shutil.rmtree(work, ignore_errors=True)
        print(f"| {name} | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
