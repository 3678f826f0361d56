#!/usr/bin/env python3
"""The table of bench/tune-baltic.sh: for each RTT, what tune said caps a
stream, what one stream carried before and after `tune --apply`, the factor,
and, with this kernel's defaults, whether tune's "sufficient" held."""
import json
import sys
from pathlib import Path


def load(p):
    return json.loads(Path(p).read_text())


def mbit(bps):
    return "-" if bps is None else f"{bps / 1e6:.1f}"


def stream(out, tag):
    r = load(out / f"stream-{tag}.json")
    run = r["runs"][0]
    s = run["streams"][0]
    v = s.get("verdict") or {}
    return run["up_bps"], s.get("retransmits"), v.get("limit"), v.get("text", "")


def tuned(out, tag):
    t = load(out / f"tune-{tag}.json")
    d = next(x for x in t["directions"] if x["from"] == "a")
    return d["binding"], d["cap_bps"], t


def shares(t):
    """The a -> b probe's measured receive and send shares, as percentages."""
    p = next((x for x in t.get("share_probes", []) if x["direction"] == "up"), {})
    pct = lambda v: "-" if v is None else f"{v * 100:.0f}%"
    return f"{pct(p.get('receive_share'))} / {pct(p.get('send_share'))}"


def main():
    out = Path(sys.argv[1])
    rtts = sys.argv[2].split(",")
    print(f"# gridperf tune in the lab: baltic (1 Gbit/s, 1 BDP queue), one TCP stream a -> b\n")
    print("## Old kernel buffers (Linux 2.6.9: tcp_rmem max 174760, tcp_wmem max 131072)\n")
    print("| RTT | shares (rcv / snd) | tune: binding before | tune: cap (Mbit/s) | before (Mbit/s) | verdict before | --apply set (max) | after (Mbit/s) | factor | tune after |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for rtt in rtts:
        b, cap, tb = tuned(out, f"{rtt}-before")
        before, _, lim_b, _ = stream(out, f"{rtt}-before")
        t = load(out / f"tune-{rtt}-apply.json")
        after_dir = next(x for x in t.get("after") or [] if x["from"] == "a")
        after, rx, lim_a, _ = stream(out, f"{rtt}-after")
        factor = after / before if before else float("nan")
        sets = sorted({f"{x['setting'].split('.')[-1]} {x['value'].split()[-1]}" for x in t["applied"] if x["outcome"] == "set"})
        print(
            f"| {rtt} | {shares(tb)} | {b} | {mbit(cap)} | {mbit(before)} | {lim_b} | {', '.join(sets)} | {mbit(after)} | {factor:.1f}x | "
            f"{after_dir['binding'] or 'sufficient'} |"
        )
    print("\n## This kernel's own defaults\n")
    print("| RTT | shares (rcv / snd) | tune: binding | tune: cap (Mbit/s) | measured (Mbit/s) | retransmits | verdict |")
    print("|---|---|---|---|---|---|---|")
    for rtt in rtts:
        b, cap, t = tuned(out, f"{rtt}-default")
        got, rx, lim, _ = stream(out, f"{rtt}-default")
        print(f"| {rtt} | {shares(t)} | {b or 'sufficient'} | {mbit(cap)} | {mbit(got)} | {rx} | {lim} |")
    left = {x["setting"] for r in rtts for x in load(out / f"tune-{r}-apply.json")["applied"] if x["outcome"] != "set"}
    print("\nEvery line was set in hosts a and b." if not left else f"\nNot set: {', '.join(sorted(left))}")


if __name__ == "__main__":
    main()
