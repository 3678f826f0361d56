#!/usr/bin/env python3
"""Parse the logs of a bench/rtt-peers.sh run and print one table per mode.

Usage: compare.py WORKDIR [--out FILE] [--markdown]

WORKDIR holds manifest.tsv (one line per tool run, written by rtt-peers.sh),
meta.tsv and the raw logs. Every figure is converted to a round-trip time in
microseconds:

  gridperf  median of its round-trip samples (JSON "gridperf.rtt/1", ns).
  sockperf  percentile 50 of its samples; run with --full-rtt so samples are
            round trips. Without --full-rtt sockperf prints RTT/2 per sample:
            such a log is detected ("avg-latency") and doubled.
  NPtcp     2 x the time NetPIPE prints. NetPIPE prints, for every size, the
            lowest of 3 trial means of (trial time / repeats / 2): half the
            round trip, best-of-3 batch mean. So the figure is a mean, not a
            median, and a best-of-3 one.
  qperf     2 x "latency". qperf's latency is the run's wall time divided by
            the messages received by both ends (2 per round trip): a mean of
            half the round trip over the whole run.

Standard library only.
"""

import argparse
import json
import math
import os
import re
import statistics
import sys
import time

from benchlib import load_meta, read

ANSI = re.compile(r"\x1b\[[0-9;]*m")
TOOLS = ["gridperf", "sockperf", "nptcp", "qperf"]
PEERS = ["sockperf", "nptcp", "qperf"]
LABEL = {"gridperf": "gridperf", "sockperf": "sockperf", "nptcp": "NPtcp", "qperf": "qperf"}
STAT = {
    "gridperf": "median",
    "sockperf": "median",
    "nptcp": "best-of-3 batch mean",
    "qperf": "mean",
}
MODE_NAME = {
    "A": "same-cpu blocking (server and client on CPU 0)",
    "B": "busy-poll two-cpu (server CPU 1, client CPU 0, both ends spinning)",
    "C": "two-cpu blocking (server CPU 1, client CPU 0)",
}


STEAL_NOTE_PCT = 2.0  # note runs during which the hypervisor stole this much CPU time


class ParseError(Exception):
    pass




# --------------------------------------------------------------- parsers
def parse_sockperf(text):
    text = ANSI.sub("", text)
    m = re.search(r"avg-(rtt|latency)=([\d.]+) \(std-dev=([\d.]+)\)", text)
    if not m:
        err = re.findall(r"^.*(?:ERROR|Invalid|invalid).*$", text, re.M)
        raise ParseError("no sockperf statistics" + (": " + err[0].strip() if err else ""))
    factor = 1.0 if m.group(1) == "rtt" else 2.0
    out = {"mean": float(m.group(2)) * factor, "stddev": float(m.group(3)) * factor}
    pct = {float(p): float(v) * factor for p, v in re.findall(r"percentile ([\d.]+) =\s+([\d.]+)", text)}
    if 50.0 not in pct:
        raise ParseError("sockperf printed no 50th percentile")
    out["median"] = pct[50.0]
    if 25.0 in pct:
        out["q1"] = pct[25.0]
    if 75.0 in pct:
        out["q3"] = pct[75.0]
    if 99.0 in pct:
        out["p99"] = pct[99.0]
    for key, pat in (("min", r"<MIN> observation =\s+([\d.]+)"), ("max", r"<MAX> observation =\s+([\d.]+)")):
        mm = re.search(pat, text)
        if mm:
            out[key] = float(mm.group(1)) * factor
    extra = {"unit_printed": "rtt" if factor == 1.0 else "rtt/2 (doubled)"}
    mm = re.search(r"\[Valid Duration\] RunTime=([\d.]+) sec; SentMessages=(\d+); ReceivedMessages=(\d+)", text)
    if mm:
        extra["valid_seconds"] = float(mm.group(1))
        extra["count"] = int(mm.group(3))
    mm = re.search(r"# dropped messages = (\d+); # duplicated messages = (\d+); # out-of-order messages = (\d+)", text)
    if mm:
        extra["dropped"], extra["duplicated"], extra["out_of_order"] = map(int, mm.groups())
    return out, extra


def parse_nptcp(text, npout, wire):
    rows = []
    for line in npout.splitlines():
        f = line.split()
        if len(f) == 3:
            try:
                rows.append((int(f[0]), float(f[1]), float(f[2])))
            except ValueError:
                pass
    if not rows:
        raise ParseError("NetPIPE wrote no data line")
    # With -l S -u S -p 0 there is exactly one line; if sizes were swept, take the nearest.
    size, mbps, t = min(rows, key=lambda r: abs(r[0] - wire))
    if t <= 0:
        raise ParseError("NetPIPE time is %r" % t)
    extra = {"np_bytes": size, "np_time_printed_s": t, "np_mbps": mbps}
    mm = re.findall(r"\d+:\s+(\d+) bytes\s+(\d+) times -->", text)
    for b, n in mm:
        if int(b) == size:
            extra["repeats_per_trial"] = int(n)
            extra["count"] = 3 * int(n)
    if size != wire:
        extra["nearest_size_used"] = size
    return {"mean": 2.0 * t * 1e6}, extra


UNIT = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "sec": 1e6, "s": 1e6}
RATE = {"/sec": 1.0, "K/sec": 1e3, "M/sec": 1e6, "G/sec": 1e9}


def parse_qperf(text):
    m = re.search(r"latency\s*=\s*([\d.,]+)\s*(ns|us|ms|sec)\b", text)
    if not m:
        err = [l.strip() for l in text.splitlines() if l.strip() and not l.startswith("#")]
        raise ParseError("no qperf latency" + (": " + err[-1] if err else ""))
    one_way_us = float(m.group(1).replace(",", "")) * UNIT[m.group(2)]
    if one_way_us <= 0:
        raise ParseError("qperf latency is 0 (it ran no exchange; e.g. message too large)")
    extra = {"qperf_latency_printed_us": one_way_us}
    mm = re.search(r"msg_rate\s*=\s*([\d.,]+)\s*([KMG]?/sec)", text)
    if mm:
        rate = float(mm.group(1).replace(",", "")) * RATE[mm.group(2)]
        extra["msg_rate_per_s"] = rate
        # msg_rate counts messages both ways: 2 per round trip.
        extra["rtt_from_msg_rate_us"] = 2e6 / rate if rate > 0 else None
    return {"mean": 2.0 * one_way_us}, extra


def load_gridperf(path, cache={}):
    if path not in cache:
        try:
            doc = json.loads(read(path))
        except (OSError, ValueError) as e:
            cache[path] = ParseError("gridperf JSON unreadable: %s" % e)
        else:
            if not str(doc.get("schema", "")).startswith("gridperf.rtt/"):
                cache[path] = ParseError("unexpected schema %r" % doc.get("schema"))
            else:
                cache[path] = doc
    if isinstance(cache[path], Exception):
        raise cache[path]
    return cache[path]


def parse_gridperf(path, proto, wire):
    doc = load_gridperf(path)
    for p in doc.get("points", []):
        if str(p.get("proto", "")).lower() == proto and int(p.get("size_bytes", -1)) == wire:
            s = p.get("summary")
            if not s:
                raise ParseError("gridperf point has no summary (no exchange came back)")
            out = {}
            for k_out, k_in in (("median", "median_ns"), ("mean", "mean_ns"), ("min", "min_ns"),
                                ("q1", "q1_ns"), ("q3", "q3_ns"), ("p99", "p99_ns"),
                                ("max", "max_ns"), ("stddev", "stddev_ns")):
                if s.get(k_in) is not None:
                    out[k_out] = float(s[k_in]) / 1000.0
            if "median" not in out:
                raise ParseError("gridperf summary has no median_ns")
            extra = {"count": s.get("count")}
            for k in ("lost", "warmup", "late", "sent"):
                v = p.get(k, s.get(k))
                if v is not None:
                    extra[k] = v
            return out, extra
    raise ParseError("no gridperf point for %s %d B" % (proto, wire))


# ------------------------------------------------------------------ main


def load_runs(workdir):
    path = os.path.join(workdir, "manifest.tsv")
    if not os.path.exists(path):
        sys.exit("compare.py: %s not found (not an rtt-peers.sh work directory?)" % path)
    runs = []
    for line in read(path).splitlines():
        if not line.strip():
            continue
        f = line.split("\t")
        if len(f) < 12:
            f += [""] * (12 - len(f))
        mode, tool, proto, size, wire, rc, logf, extra, cmd, rnd, busy, steal = f[:12]
        r = {
            "mode": mode, "round": int(rnd or 1), "tool": tool, "proto": proto, "size_bytes": int(size),
            "wire_bytes": int(wire), "exit_code": None if rc == "-" else int(rc),
            "log": logf or None, "command": cmd or None, "cpu_busy_before": busy or None,
            "steal_pct": float(steal) if steal else None,
            "statistic": STAT.get(tool), "ok": False, "rtt_us": None, "value_us": None,
            "notes": [], "error": None,
        }
        if rc == "-":
            r["skipped"] = extra or "skipped"
        else:
            try:
                if tool == "sockperf":
                    r["rtt_us"], r["detail"] = parse_sockperf(read(logf))
                    if r["wire_bytes"] != r["size_bytes"]:
                        r["notes"].append("sockperf ran at %d B (its maximum)" % r["wire_bytes"])
                elif tool == "nptcp":
                    npout = read(extra) if extra and os.path.exists(extra) else ""
                    r["npout"] = extra or None
                    r["rtt_us"], r["detail"] = parse_nptcp(read(logf), npout, r["wire_bytes"])
                elif tool == "qperf":
                    r["rtt_us"], r["detail"] = parse_qperf(read(logf))
                elif tool == "gridperf":
                    r["rtt_us"], r["detail"] = parse_gridperf(logf, proto, r["wire_bytes"])
                else:
                    raise ParseError("unknown tool %r" % tool)
                r["value_us"] = r["rtt_us"].get("median", r["rtt_us"].get("mean"))
                r["ok"] = r["value_us"] is not None and math.isfinite(r["value_us"])
                if r["steal_pct"] is not None and r["steal_pct"] >= STEAL_NOTE_PCT:
                    r["notes"].append("%s: host stole %.0f%% CPU (round %d)" % (LABEL.get(tool, tool), r["steal_pct"], r["round"]))
                if "still busy" in (busy or ""):
                    r["notes"].append("%s ran on busy CPUs (round %d): %s" % (LABEL.get(tool, tool), r["round"], busy))
                if r["exit_code"] not in (0, None):
                    r["notes"].append("exit code %s" % r["exit_code"])
            except (ParseError, OSError) as e:
                r["error"] = str(e)
                if r["exit_code"] == 124:
                    r["error"] = "timed out; " + r["error"]
        runs.append(r)
    return runs


def build_tables(runs):
    """One row per (mode, proto, size); a cell is the median over rounds of a tool's figure."""
    tables = {}
    for r in runs:
        key = (r["proto"], r["wire_bytes"] if r["proto"] == "udp" else r["size_bytes"])
        mode = tables.setdefault(r["mode"], {"tools": [], "rows": {}})
        if r["tool"] not in mode["tools"]:
            mode["tools"].append(r["tool"])
        mode["rows"].setdefault(key, {}).setdefault(r["tool"], []).append(r)
    out = {}
    for m, t in tables.items():
        tools = [x for x in TOOLS if x in t["tools"]]
        rows = []
        for (proto, size) in sorted(t["rows"], key=lambda k: (k[0], k[1])):
            cells = t["rows"][(proto, size)]
            row = {"proto": proto, "size_bytes": size, "rtt_us": {}, "statistic": {},
                   "rounds": {}, "notes": []}
            for tool in tools:
                rs = cells.get(tool, [])
                good = [r for r in rs if r["ok"]]
                vals = [r["value_us"] for r in good]
                row["rtt_us"][tool] = statistics.median(vals) if vals else None
                row["statistic"][tool] = STAT[tool]
                row["rounds"][tool] = vals
                for r in rs:
                    if r["ok"]:
                        continue
                    if r.get("skipped"):
                        msg = "%s %s" % (LABEL[tool], r["skipped"])
                    else:
                        msg = "%s error%s: %s" % (LABEL[tool], " (round %d)" % r["round"] if len(rs) > 1 else "", r["error"])
                    if msg not in row["notes"]:
                        row["notes"].append(msg)
                for r in good:
                    for n in r["notes"]:
                        if n not in row["notes"]:
                            row["notes"].append(n)
                    d = r.get("detail", {})
                    if tool == "gridperf" and d.get("lost"):
                        row["notes"].append("gridperf lost %s (round %d)" % (d["lost"], r["round"]))
                    if tool == "sockperf" and d.get("dropped"):
                        row["notes"].append("sockperf dropped %s (round %d)" % (d["dropped"], r["round"]))
                if len(vals) > 1 and min(vals) > 0 and max(vals) / min(vals) > 1.10:
                    row["notes"].append("%s rounds spread %.2f-%.2f" % (LABEL[tool], min(vals), max(vals)))
            peers = [(row["rtt_us"][p], p) for p in PEERS if row["rtt_us"].get(p) is not None]
            med_peers = [(v, p) for v, p in peers if STAT[p] == "median"]
            g = row["rtt_us"].get("gridperf")
            best = min(peers) if peers else None
            best_med = min(med_peers) if med_peers else None
            row["best_peer"] = best[1] if best else None
            row["best_peer_us"] = best[0] if best else None
            row["best_peer_statistic"] = STAT[best[1]] if best else None
            row["ratio"] = g / best[0] if (g is not None and best) else None
            row["best_median_peer"] = best_med[1] if best_med else None
            row["ratio_vs_best_median"] = g / best_med[0] if (g is not None and best_med) else None
            if best and STAT[best[1]] != "median":
                row["notes"].append("best peer figure is a %s" % STAT[best[1]])
            rows.append(row)
        out[m] = {"name": MODE_NAME.get(m, m), "tools": tools, "rows": rows}
    return out


def fmt(v, nd=2):
    return "-" if v is None else ("%.*f" % (nd, v))


def render(tables, markdown=False):
    lines = []
    for m in sorted(tables):
        t = tables[m]
        tools = t["tools"]
        hdr = ["size B", "proto"]
        for tool in tools:
            hdr.append("%s %s" % (LABEL[tool], "med" if STAT[tool] == "median" else "mean*"))
        hdr += ["best peer", "gridperf/best", "notes"]
        body = []
        for row in t["rows"]:
            cells = [str(row["size_bytes"]), row["proto"]]
            for tool in tools:
                v = row["rtt_us"].get(tool)
                cell = fmt(v)
                if tool == "sockperf" and v is not None and any("sockperf ran at" in n for n in row["notes"]):
                    cell += "+"
                cells.append(cell)
            cells.append("%s %s" % (LABEL[row["best_peer"]], fmt(row["best_peer_us"])) if row["best_peer"] else "-")
            cells.append(fmt(row["ratio"], 3))
            cells.append("; ".join(row["notes"]))
            body.append(cells)
        lines.append("")
        nr = max((len(v) for row in t["rows"] for v in row["rounds"].values()), default=0)
        lines.append("Mode %s: %s. Round-trip times in microseconds%s." % (
            m, t["name"], "; each cell the median over %d rounds" % nr if nr > 1 else ""))
        if markdown:
            lines.append("")
            lines.append("| " + " | ".join(hdr) + " |")
            lines.append("|" + "|".join("---:" if i < len(hdr) - 1 else "---" for i in range(len(hdr))) + "|")
            for c in body:
                lines.append("| " + " | ".join(x.replace("|", "/") for x in c) + " |")
        else:
            w = [max(len(hdr[i]), *(len(c[i]) for c in body)) if body else len(hdr[i]) for i in range(len(hdr) - 1)]
            lines.append("  ".join(h.rjust(w[i]) for i, h in enumerate(hdr[:-1])) + "  " + hdr[-1])
            for c in body:
                lines.append("  ".join(x.rjust(w[i]) for i, x in enumerate(c[:-1])) + "  " + c[-1])
        lines.append("")
        notes = []
        for tool in tools:
            if tool == "gridperf":
                notes.append("gridperf med: median of per-exchange round trips.")
            elif tool == "sockperf":
                notes.append("sockperf med: 50th percentile, --full-rtt (round trips); '+' = ran at 65507 B, sockperf's maximum message.")
            elif tool == "nptcp":
                notes.append("NPtcp mean*: 2 x NetPIPE's printed time = best of 3 trial means of the round trip (a mean, not a median).")
            elif tool == "qperf":
                notes.append("qperf mean*: 2 x qperf 'latency' (mean half round trip over the whole run).")
        notes.append("gridperf/best: gridperf median / lowest peer figure in the row; see notes when that figure is a mean.")
        lines.extend("  " + n for n in notes)
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workdir")
    ap.add_argument("--out", help="write raw + parsed results as JSON here (default WORKDIR/results.json)")
    ap.add_argument("--markdown", action="store_true", help="print Markdown tables")
    a = ap.parse_args()
    meta = load_meta(a.workdir)
    runs = load_runs(a.workdir)
    tables = build_tables(runs)
    doc = {
        "schema": "gridperf.bench.rtt-peers/1",
        "generated_unix": time.time(),
        "workdir": os.path.abspath(a.workdir),
        "meta": meta,
        "conversion": {
            "gridperf": "median of round-trip samples (ns -> us)",
            "sockperf": "50th percentile with --full-rtt (round trips, us); logs without --full-rtt (RTT/2) are doubled",
            "nptcp": "2 x printed time; printed time = min over 3 trials of (trial time / repeats / 2)",
            "qperf": "2 x latency; latency = run wall time / messages received by both ends",
        },
        "runs": runs,
        "tables": tables,
    }
    out = a.out or os.path.join(a.workdir, "results.json")
    with open(out, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    print(render(tables, a.markdown))
    bad = [r for r in runs if r["error"]]
    if bad:
        print("\n%d run(s) failed to give a figure; see 'error' in %s." % (len(bad), out), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
