#!/usr/bin/env python3
"""Parse the logs of a bench/stream-peers.sh run and print the tables.

Usage: stream_compare.py WORKDIR [--out FILE] [--markdown]

WORKDIR holds manifest.tsv (one line per tool run, written by
stream-peers.sh), meta.tsv and the raw logs. For every run:

  throughput  what the receiver got, payload bits per second, as the tool
              itself computes it:
                gridperf  runs[0].up_bps (JSON "gridperf.stream/1")
                iperf3    end.sum_received.bits_per_second (-J)
                iperf2    sum over streams of the server's CSV lines (-y C)
                nuttcp    rate_Mbps x 10^6 (-fparse; the receiver's figure)
  bytes       bytes the receiver got (gridperf: sum of streams[].receiver.bytes;
              iperf3: end.sum_received.bytes; iperf2: the server's CSV bytes;
              nuttcp: megabytes x 2^20)
  CPU/byte    (user + sys of the server process + user + sys of the client
              process, from /usr/bin/time) / bytes, in ns per byte
  UDP loss    each tool's own count: gridperf (sender.datagrams -
              receiver.udp.distinct) / sender.datagrams; iperf3 end.sum
              lost_percent; iperf2 the server's lost/total; nuttcp data_loss

A cell is the median over rounds. "best peer" is the highest throughput /
lowest CPU per byte among iperf3, iperf2 and nuttcp; the ratios are gridperf
/ best peer (throughput: higher is better for gridperf; CPU/byte: lower is).

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

TOOLS = ["gridperf", "gridperf-msg", "iperf3", "iperf2", "nuttcp"]
GRIDPERFS = ["gridperf", "gridperf-msg"]
PEERS = ["iperf3", "iperf2", "nuttcp"]
CASES = ["tcp1", "tcp4", "tcp1-zc", "udp1g"]
CASE_NAME = {
    "tcp1": "one TCP stream",
    "tcp4": "four parallel TCP streams",
    "tcp1-zc": "one TCP stream, zero-copy sender",
    "udp1g": "one UDP stream at 1 Gbit/s, 1472-byte datagrams",
}
# What each tool runs per case (the label in the tables).
LABEL = {
    ("gridperf", "tcp1-zc"): "gridperf sendfile",
    ("gridperf-msg", "tcp1-zc"): "gridperf msg",
    ("iperf3", "tcp1-zc"): "iperf3 -Z",
}
# Default TCP write sizes (bytes), as each tool reports or documents them.
WRITE_SIZE = {"gridperf": 131072, "gridperf-msg": 131072, "iperf3": 131072, "iperf2": 131072, "nuttcp": 65536}
UDP_HDR = 28          # IPv4 + UDP header bytes per datagram
SPREAD_NOTE = 1.10    # note a cell whose rounds differ by more than 10%
STEAL_NOTE_PCT = 2.0


class ParseError(Exception):
    pass


def label(tool, case):
    return LABEL.get((tool, case), tool)




# --------------------------------------------------------------- parsers
TIME_LINE = re.compile(r"^\s*([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


def parse_time(path, who):
    """/usr/bin/time -f '%e %U %S' -o PATH: the last matching line."""
    if not path or not os.path.exists(path):
        raise ParseError("no %s CPU figures (%s missing)" % (who, path))
    text = read(path)
    for line in reversed(text.splitlines()):
        m = TIME_LINE.match(line)
        if m:
            e, u, s = map(float, m.groups())
            other = [l.strip() for l in text.splitlines() if l.strip() and not TIME_LINE.match(l)]
            return {"elapsed_s": e, "user_s": u, "sys_s": s, "cpu_s": u + s, "time_notes": other}
    raise ParseError("%s CPU figures unreadable in %s" % (who, path))


def parse_gridperf(clog, case, udp_len):
    try:
        doc = json.loads(read(clog))
    except (OSError, ValueError) as e:
        raise ParseError("gridperf JSON unreadable: %s" % e)
    if not str(doc.get("schema", "")).startswith("gridperf.stream/"):
        raise ParseError("unexpected schema %r" % doc.get("schema"))
    runs = doc.get("runs") or []
    if not runs:
        raise ParseError("gridperf JSON has no runs")
    r = runs[0]
    if r.get("up_bps") is None:
        raise ParseError("gridperf run has no up_bps")
    spec = doc.get("spec", {})
    streams = r.get("streams", [])
    out = {
        "bps": float(r["up_bps"]),
        "bytes": sum(int(s["receiver"]["bytes"]) for s in streams),
        "streams": len(streams),
        "write_size": spec.get("write_size"),
        "duration_s": (spec.get("duration_ms") or 0) / 1000.0,
        "self_cpu": {"client_s": (r.get("client_cpu_ns") or 0) / 1e9,
                     "server_s": (r.get("agent_cpu_ns") or 0) / 1e9,
                     "cpu_ns_per_byte": r.get("cpu_ns_per_byte")},
        "notes": [],
    }
    broken = [s["index"] for s in streams if s.get("broken")]
    if broken:
        out["notes"].append("gridperf streams broken: %s" % broken)
    zc = [s["sender"].get("zerocopy") for s in streams if s["sender"].get("zerocopy")]
    if zc:
        out["zerocopy"] = {k: sum(z.get(k) or 0 for z in zc) for k in ("sends", "completions", "copied")}
    if case == "udp1g":
        sent = sum(int(s["sender"].get("datagrams") or 0) for s in streams)
        udps = [s["receiver"].get("udp") or {} for s in streams]
        distinct = sum(int(u.get("distinct") or 0) for u in udps)
        out["udp"] = {
            "sent": sent, "distinct": distinct,
            "received": sum(int(u.get("received") or 0) for u in udps),
            "max_seq": [u.get("max_seq") for u in udps],
            "loss_pct": 100.0 * (sent - distinct) / sent if sent else None,
        }
        if out["duration_s"] > 0 and sent:
            out["udp"]["sent_payload_bps"] = sent * udp_len * 8 / out["duration_s"]
            out["udp"]["sent_wire_bps"] = sent * (udp_len + UDP_HDR) * 8 / out["duration_s"]
    # Sanity: up_bps should be the received bytes over the test's duration.
    if out["duration_s"] > 0 and out["bytes"]:
        chk = out["bytes"] * 8 / out["duration_s"]
        if abs(chk / out["bps"] - 1) > 0.03:
            out["notes"].append("gridperf up_bps %.4g differs from bytes*8/duration %.4g" % (out["bps"], chk))
    return out


def parse_iperf3(clog, case, udp_len):
    try:
        doc = json.loads(read(clog))
    except (OSError, ValueError) as e:
        raise ParseError("iperf3 JSON unreadable: %s" % e)
    if doc.get("error"):
        raise ParseError("iperf3: %s" % doc["error"])
    end = doc.get("end", {})
    sr = end.get("sum_received")
    if not sr:
        raise ParseError("iperf3 JSON has no end.sum_received")
    ts = doc.get("start", {}).get("test_start", {})
    out = {"bps": float(sr["bits_per_second"]), "bytes": int(sr["bytes"]),
           "streams": ts.get("num_streams"), "write_size": ts.get("blksize"),
           "duration_s": float(sr.get("seconds") or 0), "notes": [],
           "self_cpu": end.get("cpu_utilization_percent")}
    if case == "udp1g":
        s = end.get("sum", {})
        ss = end.get("sum_sent", s)
        out["udp"] = {"sent": ss.get("packets"), "lost": s.get("lost_packets"),
                      "packets": s.get("packets"), "loss_pct": s.get("lost_percent")}
        if ss.get("seconds"):
            out["udp"]["sent_payload_bps"] = float(ss["bytes"]) * 8 / float(ss["seconds"])
            if ss.get("packets"):
                out["udp"]["sent_wire_bps"] = (float(ss["bytes"]) + UDP_HDR * ss["packets"]) * 8 / float(ss["seconds"])
    return out


def csv_lines(text):
    rows = []
    for line in text.splitlines():
        f = line.strip().split(",")
        if len(f) >= 9 and re.match(r"^\d{14}$", f[0]):
            rows.append(f)
    return rows


def parse_iperf2(clog, slog, case, udp_len):
    rows = [f for f in csv_lines(read(slog)) if int(f[5]) >= 0]
    if not rows:
        raise ParseError("iperf2 server printed no CSV report")
    out = {"bps": sum(float(f[8]) for f in rows), "bytes": sum(int(f[7]) for f in rows),
           "streams": len(rows), "write_size": udp_len if case == "udp1g" else WRITE_SIZE["iperf2"],
           "notes": []}
    iv = rows[0][6].split("-")
    try:
        out["duration_s"] = float(iv[1]) - float(iv[0])
    except (IndexError, ValueError):
        out["duration_s"] = None
    if case == "udp1g":
        if len(rows[0]) < 13:
            raise ParseError("iperf2 server CSV line has no UDP fields")
        lost = sum(int(f[10]) for f in rows)
        total = sum(int(f[11]) for f in rows)
        out["udp"] = {"lost": lost, "packets": total, "loss_pct": 100.0 * lost / total if total else None}
        cl = [f for f in csv_lines(read(clog)) if int(f[5]) >= 0]
        if cl:
            # The client's own rate (its CSV interval is rounded to 0.1 s; the rate is not).
            sent = sum(float(f[8]) for f in cl)
            out["udp"]["sent_payload_bps"] = sent
            out["udp"]["sent_wire_bps"] = sent * (udp_len + UDP_HDR) / udp_len
    return out


def parse_nuttcp(clog, case, udp_len):
    text = read(clog)
    kv = dict(re.findall(r"(\w+)=([-\d.]+)", text))
    if "megabytes" not in kv or "rate_Mbps" not in kv:
        err = [l.strip() for l in text.splitlines() if l.strip()]
        raise ParseError("no nuttcp summary" + (": " + err[-1] if err else ""))
    out = {"bps": float(kv["rate_Mbps"]) * 1e6, "bytes": int(round(float(kv["megabytes"]) * 1048576)),
           "duration_s": float(kv.get("real_seconds", 0)), "streams": None,
           "write_size": udp_len if case == "udp1g" else WRITE_SIZE["nuttcp"],
           "self_cpu": {"tx_cpu_pct": kv.get("tx_cpu"), "rx_cpu_pct": kv.get("rx_cpu")}, "notes": []}
    if case == "udp1g":
        pkt = int(kv.get("pkt", 0))
        out["udp"] = {"lost": int(kv.get("drop", 0)), "packets": pkt,
                      "loss_pct": float(kv["data_loss"]) if "data_loss" in kv else None}
        if out["duration_s"] and pkt:
            out["udp"]["sent_payload_bps"] = pkt * udp_len * 8 / out["duration_s"]
            out["udp"]["sent_wire_bps"] = pkt * (udp_len + UDP_HDR) * 8 / out["duration_s"]
    return out


# ------------------------------------------------------------------ main


FIELDS = ["round", "case", "tool", "rc", "client_log", "client_err", "client_time", "server_log",
          "server_time", "port", "note", "client_command", "server_command", "cpu_busy_before",
          "steal_pct", "loadavg1"]


def load_runs(workdir, udp_len):
    path = os.path.join(workdir, "manifest.tsv")
    if not os.path.exists(path):
        sys.exit("stream_compare.py: %s not found (not a stream-peers.sh work directory?)" % path)
    runs = []
    for line in read(path).splitlines():
        if not line.strip():
            continue
        f = line.split("\t")
        f += [""] * (len(FIELDS) - len(f))
        r = dict(zip(FIELDS, f))
        for k in ("client_log", "client_err", "client_time", "server_log", "server_time"):
            if r[k] and not os.path.isabs(r[k]):
                r[k] = os.path.join(workdir, r[k])
        r["round"] = int(r["round"] or 1)
        r["exit_code"] = None if r["rc"] == "-" else int(r["rc"])
        r["steal_pct"] = float(r["steal_pct"]) if r["steal_pct"] else None
        r.update({"ok": False, "error": None, "notes": [], "bps": None, "bytes": None,
                  "cpu_ns_per_byte": None})
        if r["rc"] == "-":
            r["skipped"] = r["note"] or "n/a"
            runs.append(r)
            continue
        try:
            if r["note"]:
                raise ParseError(r["note"])
            case, tool = r["case"], r["tool"]
            if tool in GRIDPERFS:
                p = parse_gridperf(r["client_log"], case, udp_len)
            elif tool == "iperf3":
                p = parse_iperf3(r["client_log"], case, udp_len)
            elif tool == "iperf2":
                p = parse_iperf2(r["client_log"], r["server_log"], case, udp_len)
            elif tool == "nuttcp":
                p = parse_nuttcp(r["client_log"], case, udp_len)
            else:
                raise ParseError("unknown tool %r" % tool)
            r["notes"].extend(p.pop("notes", []))
            r.update(p)
            r["server_cpu"] = parse_time(r["server_time"], "server")
            r["client_cpu"] = parse_time(r["client_time"], "client")
            cpu = r["server_cpu"]["cpu_s"] + r["client_cpu"]["cpu_s"]
            r["cpu_s"] = cpu
            if not r["bytes"]:
                raise ParseError("no bytes received")
            r["cpu_ns_per_byte"] = cpu / r["bytes"] * 1e9
            r["ok"] = math.isfinite(r["bps"]) and r["bps"] > 0
            if tool in GRIDPERFS and r.get("self_cpu"):
                # gridperf measures its own ends' CPU too: they should agree with time(1).
                for side, mine in (("client", r["client_cpu"]["cpu_s"]), ("server", r["server_cpu"]["cpu_s"])):
                    own = r["self_cpu"]["%s_s" % side]
                    if own and abs(own - mine) > max(0.05, 0.10 * mine):
                        r["notes"].append("gridperf's own %s CPU %.2fs vs time(1) %.2fs (round %d)" % (side, own, mine, r["round"]))
            if r["exit_code"] not in (0, None):
                r["notes"].append("%s client exit code %s (round %d)" % (tool, r["exit_code"], r["round"]))
            if r["steal_pct"] is not None and r["steal_pct"] >= STEAL_NOTE_PCT:
                r["notes"].append("%s: host stole %.0f%% CPU (round %d)" % (label(tool, case), r["steal_pct"], r["round"]))
            if "still busy" in (r["cpu_busy_before"] or ""):
                r["notes"].append("%s ran on busy CPUs (round %d)" % (label(tool, case), r["round"]))
        except (ParseError, OSError, ValueError, KeyError, TypeError) as e:
            r["error"] = "%s: %s" % (type(e).__name__, e) if not isinstance(e, ParseError) else str(e)
            if r["exit_code"] == 124:
                r["error"] = "timed out; " + r["error"]
        runs.append(r)
    return runs


def med(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


def build_tables(runs):
    cases = {}
    for r in runs:
        c = cases.setdefault(r["case"], {})
        c.setdefault(r["tool"], []).append(r)
    out = []
    for case in [c for c in CASES if c in cases] + [c for c in cases if c not in CASES]:
        byt = cases[case]
        row = {"case": case, "name": CASE_NAME.get(case, case), "tools": {}, "notes": []}
        for tool in [t for t in TOOLS if t in byt]:
            rs = byt[tool]
            good = [r for r in rs if r["ok"]]
            cell = {"label": label(tool, case), "n": len(good),
                    "bps": med(r["bps"] for r in good),
                    "bps_rounds": [r["bps"] for r in good],
                    "cpu_ns_per_byte": med(r["cpu_ns_per_byte"] for r in good),
                    "cpu_rounds": [r["cpu_ns_per_byte"] for r in good],
                    "server_cpu_s": med(r["server_cpu"]["cpu_s"] for r in good),
                    "server_ns_per_byte": med(r["server_cpu"]["cpu_s"] / r["bytes"] * 1e9 for r in good),
                    "client_ns_per_byte": med(r["client_cpu"]["cpu_s"] / r["bytes"] * 1e9 for r in good),
                    "client_cpu_s": med(r["client_cpu"]["cpu_s"] for r in good),
                    "write_size": good[0].get("write_size") if good else None,
                    "skipped": next((r["skipped"] for r in rs if r.get("skipped")), None)}
            if case == "udp1g":
                cell["loss_pct"] = med((r.get("udp") or {}).get("loss_pct") for r in good)
                cell["sent_payload_bps"] = med((r.get("udp") or {}).get("sent_payload_bps") for r in good)
                cell["sent_wire_bps"] = med((r.get("udp") or {}).get("sent_wire_bps") for r in good)
            if tool == "gridperf-msg" or (tool == "gridperf" and case == "tcp1-zc"):
                zc = [r.get("zerocopy") for r in good if r.get("zerocopy")]
                if zc:
                    cell["zerocopy"] = zc
            row["tools"][tool] = cell
            for r in rs:
                if r.get("skipped"):
                    continue
                if not r["ok"]:
                    msg = "%s error (round %d): %s" % (cell["label"], r["round"], r["error"])
                    row["notes"].append(msg)
                for n in r["notes"]:
                    if n not in row["notes"]:
                        row["notes"].append(n)
            for what, vals in (("throughput", cell["bps_rounds"]), ("CPU/byte", cell["cpu_rounds"])):
                if len(vals) > 1 and min(vals) > 0 and max(vals) / min(vals) > SPREAD_NOTE:
                    row["notes"].append("%s %s rounds spread x%.2f" % (cell["label"], what, max(vals) / min(vals)))
        peers_bps = [(row["tools"][p]["bps"], p) for p in PEERS if row["tools"].get(p, {}).get("bps")]
        peers_cpu = [(row["tools"][p]["cpu_ns_per_byte"], p) for p in PEERS
                     if row["tools"].get(p, {}).get("cpu_ns_per_byte")]
        bb = max(peers_bps) if peers_bps else None
        bc = min(peers_cpu) if peers_cpu else None
        row["best_peer_bps"] = {"tool": bb[1], "label": label(bb[1], case), "bps": bb[0]} if bb else None
        row["best_peer_cpu"] = {"tool": bc[1], "label": label(bc[1], case), "cpu_ns_per_byte": bc[0]} if bc else None
        row["ratios"] = {}
        for g in GRIDPERFS:
            cell = row["tools"].get(g)
            if not cell:
                continue
            row["ratios"][g] = {
                "bps": cell["bps"] / bb[0] if (cell["bps"] and bb) else None,
                "cpu_ns_per_byte": cell["cpu_ns_per_byte"] / bc[0] if (cell["cpu_ns_per_byte"] and bc) else None,
            }
        out.append(row)
    return out


def gbps(v):
    return "-" if v is None else "%.2f" % (v / 1e9)


def f2(v, nd=2):
    return "-" if v is None else "%.*f" % (nd, v)


def table(hdr, body, markdown):
    lines = []
    if markdown:
        lines.append("| " + " | ".join(hdr) + " |")
        lines.append("|" + "|".join("---" if i == 0 or i == len(hdr) - 1 else "---:" for i in range(len(hdr))) + "|")
        for c in body:
            lines.append("| " + " | ".join(x.replace("|", "/") for x in c) + " |")
    else:
        w = [max([len(hdr[i])] + [len(c[i]) for c in body]) for i in range(len(hdr) - 1)]
        lines.append("  ".join((h.ljust if i == 0 else h.rjust)(w[i]) for i, h in enumerate(hdr[:-1])) + "  " + hdr[-1])
        for c in body:
            lines.append("  ".join((x.ljust if i == 0 else x.rjust)(w[i]) for i, x in enumerate(c[:-1])) + "  " + c[-1])
    return lines


def render(rows, meta, markdown=False):
    L = []
    nr = meta.get("rounds", "?")
    L.append("Loopback 127.0.0.1, %s s per run, median of %s rounds per cell; %s; %s CPUs (%s)." % (
        meta.get("seconds", "?"), nr, meta.get("kernel", "?"), meta.get("cpus", "?"), meta.get("cpu_model", "?")))
    L.append("Throughput: payload Gbit/s the receiver got. CPU ns/B: ns of CPU (user+sys, server + client) per byte")
    L.append("received; server ns/B (the receiver) and client ns/B (the sender) split it; CPU s: medians over rounds.")
    for row in rows:
        L.append("")
        L.append("%s: %s" % (row["case"], row["name"]))
        udp = row["case"] == "udp1g"
        hdr = ["tool", "Gbit/s", "rounds Gbit/s", "CPU ns/B", "server ns/B", "client ns/B",
               "server CPU s", "client CPU s", "write B"]
        if udp:
            hdr[-1:-1] = ["loss %", "sent Mbit/s (payload)", "sent Mbit/s (+hdr)"]
        hdr.append("notes")
        body = []
        for tool, c in row["tools"].items():
            if c["skipped"]:
                body.append([c["label"], "n/a"] + ["-"] * (len(hdr) - 3) + [c["skipped"].replace("n/a: ", "")])
                continue
            cells = [c["label"], gbps(c["bps"]), "/".join(gbps(v) for v in c["bps_rounds"]) or "-",
                     f2(c["cpu_ns_per_byte"], 3), f2(c["server_ns_per_byte"], 3), f2(c["client_ns_per_byte"], 3),
                     f2(c["server_cpu_s"]), f2(c["client_cpu_s"])]
            if udp:
                cells += [f2(c.get("loss_pct")), f2(c["sent_payload_bps"] / 1e6 if c.get("sent_payload_bps") else None, 0),
                          f2(c["sent_wire_bps"] / 1e6 if c.get("sent_wire_bps") else None, 0)]
            cells.append(str(c["write_size"]) if c["write_size"] else "-")
            extra = ""
            if c.get("zerocopy"):
                z = c["zerocopy"][0]
                extra = "MSG_ZEROCOPY sends %s, copied by the kernel %s (round 1)" % (z.get("sends"), z.get("copied")) \
                    if tool == "gridperf-msg" else ""
            cells.append(extra)
            body.append(cells)
        L.extend(table(hdr, body, markdown))
        for n in row["notes"]:
            L.append("  note: " + n)
    # Summary.
    L.append("")
    L.append("Summary: gridperf / best peer (throughput: higher is better for gridperf; CPU per byte: lower is).")
    hdr = ["case", "gridperf Gbit/s", "best peer Gbit/s", "ratio", "gridperf CPU ns/B", "best peer CPU ns/B", "ratio", "notes"]
    body = []
    for row in rows:
        for g in GRIDPERFS:
            c = row["tools"].get(g)
            if not c:
                continue
            name = row["case"] + ("" if row["case"] != "tcp1-zc" else (" sendfile" if g == "gridperf" else " msg"))
            bb, bc, rt = row["best_peer_bps"], row["best_peer_cpu"], row["ratios"][g]
            extra = ""
            if row["case"] == "udp1g":
                extra = "loss %: " + ", ".join("%s %s" % (t, f2(x.get("loss_pct"))) for t, x in row["tools"].items())
            body.append([name, gbps(c["bps"]),
                         "%s (%s)" % (gbps(bb["bps"]), bb["label"]) if bb else "-",
                         f2(rt["bps"], 3),
                         f2(c["cpu_ns_per_byte"], 3),
                         "%s (%s)" % (f2(bc["cpu_ns_per_byte"], 3), bc["label"]) if bc else "-",
                         f2(rt["cpu_ns_per_byte"], 3), extra])
    L.extend(table(hdr, body, markdown))
    return "\n".join(L)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workdir")
    ap.add_argument("--out", help="write raw + parsed results as JSON here (default WORKDIR/results.json)")
    ap.add_argument("--markdown", action="store_true", help="print Markdown tables")
    a = ap.parse_args()
    meta = load_meta(a.workdir)
    udp_len = int(meta.get("udp_len", 1472))
    runs = load_runs(a.workdir, udp_len)
    rows = build_tables(runs)
    doc = {
        "schema": "gridperf.bench.stream-peers/1",
        "generated_unix": time.time(),
        "workdir": os.path.abspath(a.workdir),
        "meta": meta,
        "definitions": {
            "bps": "payload bits per second the receiver got, each tool's own figure",
            "cpu_ns_per_byte": "(server user+sys + client user+sys, /usr/bin/time) / bytes received x 1e9",
            "best_peer": "highest bps / lowest cpu_ns_per_byte among iperf3, iperf2, nuttcp",
            "ratio": "gridperf / best peer",
            "write_size_bytes": WRITE_SIZE,
        },
        "runs": runs,
        "tables": rows,
    }
    out = a.out or os.path.join(a.workdir, "results.json")
    with open(out, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    print(render(rows, meta, a.markdown))
    bad = [r for r in runs if r["error"]]
    if bad:
        print("\n%d run(s) failed to give a figure; see 'error' in %s." % (len(bad), out), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
