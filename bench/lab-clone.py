#!/usr/bin/env python3
"""bench/lab-clone.py: does `gridperf lab clone` find a path it is not told?
(issue 36)

For each of N hidden paths, drawn at random (seeded) over the issue's
ranges -- rate 20M-2G each way (log-uniform, each direction its own), RTT
1-300 ms (log-uniform), jitter up to 2% of the RTT (at most 1 ms), normal
or exponential (a long tail: the right-skewed delay clone fits a table to),
0-1% loss in bursts of 1-4 packets (a quarter of the paths lossless), a
queue of 0.2-2 BDP -- it brings a lab of those settings up, starts an agent
on host b, runs `gridperf lab clone 10.77.2.1 --verify --json` on host a
(the clone is told only the address), and tabulates the hidden settings
against the fitted ones, and the real path's probes and TCP streams
against the clone's.

Usage: bench/lab-clone.py [--paths 8] [--seed 36] [--time 60s] [--max-rate 2.5G]
                          [--gridperf target/release/gridperf] [--out DIR]
Needs root or a user who may make labs. Every lab it brings up it takes
down by name; every agent it starts it stops by pid.
"""

import argparse
import datetime
import json
import math
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def draw(rng):
    """One hidden path: lab up flags and the values to compare."""
    lr = lambda lo, hi: math.exp(rng.uniform(math.log(lo), math.log(hi)))
    rate_ab, rate_ba = round(lr(20e6, 2e9), -3), round(lr(20e6, 2e9), -3)
    rtt = round(lr(1e-3, 300e-3), 6)
    jitter = round(min(0.02 * rtt, 1e-3) * rng.random(), 6)
    lossy = rng.random() >= 0.25
    loss = round(rng.uniform(0.0005, 0.01), 6) if lossy else 0.0
    burst = rng.choice([1, 2, 3, 4])
    queue = round(rng.uniform(0.2, 2.0), 2)
    shape = rng.choice(["normal", "exponential"])
    flags = ["--rate", f"{rate_ab:.0f}", "--set-ba", f"rate={rate_ba:.0f}", "--rtt", f"{rtt * 1e6:.0f}us",
             "--queue", f"{queue}bdp"]
    if jitter > 0:
        flags += ["--jitter", f"{jitter * 1e6:.0f}us/{shape}"]
    if loss > 0:
        flags += ["--loss", f"{loss * 100:.4f}%", "--burst", str(burst)]
    return {"rate_ab": rate_ab, "rate_ba": rate_ba, "rtt": rtt, "jitter": jitter, "shape": shape, "loss": loss,
            "burst": burst if loss > 0 else None, "queue_bdp": queue, "flags": flags}


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def one(gp, name, h, budget, max_rate):
    up = run([gp, "lab", "up", "--name", name] + h["flags"])
    if up.returncode != 0:
        return {"error": "lab up: " + up.stderr.strip()}
    agent = subprocess.Popen([gp, "lab", "exec", "--name", name, "b", "--", gp, "serve"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        t0 = time.monotonic()
        o = run([gp, "lab", "exec", "--name", name, "a", "--", gp, "lab", "clone", "10.77.2.1", "--time", budget,
                 "--max-rate", max_rate, "--verify", "--json", "--no-store"], timeout=900)
        wall = time.monotonic() - t0
        if o.returncode != 0:
            return {"error": f"clone exit {o.returncode}: " + o.stderr.strip().splitlines()[-1]}
        return {"clone": json.loads(o.stdout), "wall": wall}
    finally:
        agent.terminate()
        try:
            agent.wait(timeout=10)
        except subprocess.TimeoutExpired:
            agent.kill()
        run([gp, "lab", "down", "--name", name])


def err(got, want):
    return None if got is None or not want else got / want - 1.0


def pct(e):
    return "-" if e is None else f"{e * 100:+.1f}%"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--paths", type=int, default=8)
    ap.add_argument("--seed", type=int, default=36)
    ap.add_argument("--time", default="60s")
    ap.add_argument("--max-rate", default="2.5G")
    ap.add_argument("--gridperf", default=os.path.join(REPO, "target/release/gridperf"))
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if not 1 <= a.paths <= 50:
        sys.exit("lab-clone: --paths takes 1 to 50")
    gp = os.path.abspath(a.gridperf)
    if not os.access(gp, os.X_OK):
        sys.exit(f"lab-clone: no {gp}: cargo build --release")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    out = a.out or os.path.join(REPO, "bench/results", f"lab-clone-{stamp}")
    os.makedirs(out, exist_ok=True)
    header = benchlib.run_header(sys.argv)
    rng = random.Random(a.seed)
    rows = []
    for k in range(a.paths):
        h = draw(rng)
        print(f"lab-clone: path {k + 1}/{a.paths}: {' '.join(h['flags'])}", file=sys.stderr, flush=True)
        r = one(gp, f"bc{os.getpid() % 10000}-{k}", h, a.time, a.max_rate)
        r["hidden"] = h
        rows.append(r)
        with open(os.path.join(out, f"path-{k + 1}.json"), "w") as f:
            json.dump(r, f, indent=1)
    write_summary(out, rows, a, header)
    print(f"lab-clone: {out}/summary.md", file=sys.stderr)


TARGETS = {"rate": 0.10, "rtt": 0.05, "queue": 0.35, "tcp1": 0.15, "tcp1-self": 0.15, "rtt64": 0.05, "rtt64-p95": 0.10,
           "tcp4": 0.15}


def write_summary(out, rows, a, header):
    lines = [f"# lab clone over {len(rows)} hidden paths", ""] + header + [
             f"`bench/lab-clone.py --paths {a.paths} --seed {a.seed} --time {a.time} --max-rate {a.max_rate}`, "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
             f"{os.cpu_count()} CPUs, {run(['uname', '-r']).stdout.strip()}, as uid {os.getuid()}.", "",
             "Each path's settings were hidden from the clone (it was given the agent's address only). "
             "Errors are fitted / hidden - 1; loss as a ratio; targets (issue 36): rates 10%, RTT 5%, "
             "loss within 2x where >= 0.01%, queue 35%, one stream's throughput through the clone 15%, "
             "64 B RTT p50 5%, clone <= 120 s.", "",
             "| # | hidden: rate a->b / b->a, RTT, jitter, loss (burst), queue | rate a->b | rate b->a | RTT | loss a->b | loss b->a | queue a->b | queue b->a | clone s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    vrows = ["| # | jitter hidden / fitted | RTT p50 real / clone | RTT p95 real / clone | 1 CUBIC real / clone | 1 CUBIC real / real again | 4 CUBIC real / clone |",
             "|---|---|---|---|---|---|---|"]
    tally = {}

    def mark(key, ok):
        t = tally.setdefault(key, [0, 0])
        t[0] += bool(ok)
        t[1] += 1

    for k, r in enumerate(rows, 1):
        h = r["hidden"]
        desc = (f"{h['rate_ab'] / 1e6:.0f}M / {h['rate_ba'] / 1e6:.0f}M, {h['rtt'] * 1e3:.2f} ms, "
                f"{h['jitter'] * 1e6:.0f} us {h.get('shape', 'normal')}, {h['loss'] * 100:.3f}% ({h['burst'] or '-'}), "
                f"{h['queue_bdp']} BDP")
        if "error" in r:
            lines.append(f"| {k} | {desc} | {r['error']} |||||||")
            continue
        c = r["clone"]
        p = c["profile"]
        v = lambda d, f: p[d][f]["value"]
        e_ab, e_ba = err(v("ab", "rate_bps"), h["rate_ab"]), err(v("ba", "rate_bps"), h["rate_ba"])
        e_rtt = err(2 * v("ab", "delay_s"), h["rtt"])
        mark("rate", e_ab is not None and abs(e_ab) <= TARGETS["rate"])
        mark("rate", e_ba is not None and abs(e_ba) <= TARGETS["rate"])
        mark("rtt", e_rtt is not None and abs(e_rtt) <= TARGETS["rtt"])

        def loss_cell(d):
            got = v(d, "loss")
            if h["loss"] == 0:
                return f"{got * 100:.4f}% (none)"
            ratio = got / h["loss"] if got else 0
            if h["loss"] >= 1e-4:
                mark("loss", 0.5 <= ratio <= 2)
            return f"{got * 100:.3f}% (x{ratio:.2f})"

        def queue_cell(d, rate):
            want = h["queue_bdp"] * rate * h["rtt"] / 8
            e = err(v(d, "queue_bytes"), want)
            mark("queue", e is not None and abs(e) <= TARGETS["queue"])
            return pct(e)

        mark("wall", c.get("seconds", 1e9) <= 120)
        lines.append(f"| {k} | {desc} | {pct(e_ab)} | {pct(e_ba)} | {pct(e_rtt)} | {loss_cell('ab')} | {loss_cell('ba')} "
                     f"| {queue_cell('ab', h['rate_ab'])} | {queue_cell('ba', h['rate_ba'])} | {c.get('seconds', 0):.0f} |")
        ver = {x["what"]: x for x in c.get("verify", [])}

        def pair(what, scale, unit, key=None):
            x = ver.get(what)
            if not x or x["real"] is None or x["clone"] is None:
                return "-"
            if key:
                mark(key, x["error"] is not None and abs(x["error"]) <= TARGETS[key])
            return f"{x['real'] * scale:.2f} / {x['clone'] * scale:.2f} {unit} ({pct(x['error'])})"

        shapes = f"{h.get('shape', 'normal') if h['jitter'] > 0 else 'none'} / {p['ab'].get('jitter_shape', '-')}"
        vrows.append(f"| {k} | {shapes} | {pair('RTT p50 (64 B)', 1e3, 'ms', 'rtt64')} | {pair('RTT p95 (64 B)', 1e3, 'ms', 'rtt64-p95')} "
                     f"| {pair('TCP, 1 CUBIC stream a -> b', 1e-6, 'Mbit/s', 'tcp1')} | {pair('the same, real path run again', 1e-6, 'Mbit/s', 'tcp1-self')} "
                     f"| {pair('TCP, 4 CUBIC streams a -> b', 1e-6, 'Mbit/s', 'tcp4')} |")
    lines += ["", "## The real path beside its clone (`--verify`)", ""] + vrows
    lines += ["", "## Within target", ""]
    for key, (ok, n) in tally.items():
        lines.append(f"- {key}: {ok} of {n}")
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
