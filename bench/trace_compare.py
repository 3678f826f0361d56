#!/usr/bin/env python3
"""bench/trace_compare.py: the bulk direction of a capture as gridperf trace,
tcptrace and tshark read it, beside the sender's TCP_INFO (bench/trace-peers.sh).

  trace_compare.py FILE GRIDPERF_JSON TCPTRACE_TXT TSHARK_CONV_TXT TSHARK_RETRANS_TXT STREAM_JSON
      prints one JSON line
  trace_compare.py --table < lines
      prints the side-by-side table
"""
import collections
import json
import os
import re
import statistics
import sys


def gridperf(path):
    try:
        r = json.load(open(path))
    except (OSError, ValueError):
        return {"error": "no output"}
    dirs = [d for c in r.get("connections", []) for d in c.get("directions", [])]
    if not dirs:
        return {"error": "no connection"}
    d = max(dirs, key=lambda d: d["bytes_acked"])
    return {
        "frames": r["frames"],
        "bytes": d["bytes_acked"],
        "retransmits": d["retransmits"],
        "rtt_ms": d.get("rtt_median_ms"),
        "rtt_min_ms": d.get("rtt_min_ms"),
        "mbps": d["throughput_bps"] / 1e6,
    }


def tcptrace(path):
    text = open(path, errors="replace").read()
    if "TCP connection" not in text:
        first = text.strip().splitlines()[:1]
        return {"error": first[0][:80] if first else "no output"}
    best = None
    for block in text.split("TCP connection ")[1:]:
        cols = [{}, {}]
        for line in block.splitlines():
            # two columns: "name: value unit   name: value unit"
            parts = re.findall(r"([a-zA-Z][a-zA-Z0-9 /#()_-]*?):\s+([0-9]+(?:\.[0-9]+)?)(?![0-9.:])\s*([A-Za-z/]*)", line)
            for k, (name, value, unit) in enumerate(parts[:2]):
                try:
                    cols[k][name.strip()] = (float(value), unit)
                except ValueError:
                    pass
        for c in cols:
            b = c.get("unique bytes sent", (0, ""))[0]
            if best is None or b > best.get("unique bytes sent", (0, ""))[0]:
                best = c
    if not best:
        return {"error": "no connection"}
    get = lambda k: best.get(k, (None, ""))[0]
    thr = get("throughput")
    return {
        "bytes": int(get("unique bytes sent") or 0),
        "retransmits": int(get("rexmt data pkts") or 0),
        "rtt_ms": get("RTT avg"),
        "rtt_min_ms": get("RTT min"),
        "mbps": thr * 8 / 1e6 if thr is not None else None,
    }


def tshark(conv_path, retrans_path):
    text = open(conv_path, errors="replace").read()
    best = None
    for line in text.splitlines():
        if "<->" not in line:
            continue
        # after the second endpoint: frames and bytes each way, the totals (tshark rounds bytes to its unit)
        rest = line.split("<->", 1)[1].split(None, 1)[1]
        nums = re.findall(r"(\d[\d,.]*)\s*(bytes|kB|MB|GB)?", rest)
        # frames, bytes (<-), frames, bytes (->), frames, bytes (total), start, duration
        vals = []
        for n, unit in nums:
            try:
                v = float(n.replace(",", ""))
            except ValueError:
                continue
            v *= {"kB": 1e3, "MB": 1e6, "GB": 1e9}.get(unit, 1)
            vals.append(v)
        if len(vals) >= 6 and (best is None or vals[5] > best[5]):
            best = vals
    if best is None:
        first = text.strip().splitlines()[:1]
        return {"error": first[0][:80] if first else "no output"}
    ids = [l.strip() for l in open(retrans_path) if l.strip()]
    most = collections.Counter(ids).most_common(1)
    return {"frames": int(best[4]), "wire_bytes": best[5], "retransmits": most[0][1] if most else 0}


def tcp_info(path):
    try:
        r = json.load(open(path))
    except (OSError, ValueError):
        return {}
    s = max((s for run in r.get("runs", []) for s in run["streams"]), key=lambda s: s["receiver"]["bytes"])
    srtt = [t["srtt_us"] / 1000 for t in s.get("timeline", []) if t.get("srtt_us")]
    return {
        "bytes": s["receiver"]["bytes"],
        "retransmits": s.get("retransmits"),
        "rtt_ms": statistics.median(srtt) if srtt else None,
        "mbps": s["throughput_bps"] / 1e6,
    }


def table():
    rows = [json.loads(l) for l in sys.stdin if l.strip()]
    fmt = lambda v, p=1: "-" if v is None else (f"{v:.{p}f}" if isinstance(v, float) else str(v))
    print(f"{'capture':<14} {'tool':<9} {'bytes (bulk)':>14} {'retrans':>8} {'RTT ms':>14} {'Mbit/s':>9}  note")
    for r in rows:
        for tool in ("tcp_info", "gridperf", "tcptrace", "tshark"):
            f = r.get(tool) or {}
            if not f:
                continue
            if "error" in f:
                print(f"{r['file']:<14} {tool:<9} {'cannot read it: ' + f['error']}")
                continue
            rtt = f.get("rtt_ms")
            rtt_s = "-" if rtt is None else f"{rtt:.2f}" + (" (avg)" if tool == "tcptrace" else " (med)")
            b = f.get("bytes")
            if b is None and f.get("wire_bytes") is not None:
                b = f"~{f['wire_bytes'] / 1e6:.0f} MB"
            note = "frames' bytes, headers in, as tshark rounds them; retransmitted frames" if tool == "tshark" else ""
            print(f"{r['file']:<14} {tool:<9} {fmt(b):>14} {fmt(f.get('retransmits')):>8} {rtt_s:>14} "
                  f"{fmt(f.get('mbps'), 2):>9}  {note}")


def main():
    if sys.argv[1:] == ["--table"]:
        table()
        return
    f, g, t, s, sr, sj = sys.argv[1:7]
    print(json.dumps({
        "file": os.path.basename(f),
        "tcp_info": tcp_info(sj),
        "gridperf": gridperf(g),
        "tcptrace": tcptrace(t),
        "tshark": tshark(s, sr),
    }))


if __name__ == "__main__":
    main()
