#!/usr/bin/env python3
"""bench/survey_agree.py: do surveys agree? (issue 35)

Reads `gridperf survey --json` outputs and, for every pair of them, every
network both hold and every size of SIZES (the quick survey's, by default):
each survey's verdict there (a winner, a tie, or nothing: a size it left
out or did not measure), taken from the range of its best-protocol table
that covers the size. A pair of verdicts is
  - a contradiction: two different winners, or a winner that the other's
    tie leaves out (the other shows it slower);
  - one-only: one names a winner, the other a tie that holds it;
  - agreement otherwise.
The claimed sizes are those where at least one of the two names a winner.
Prints a table per pair and a summary line; exits 1 on any contradiction.

Usage: survey_agree.py [--sizes 1,64,...] [--full FULL.json] A.json B.json [C.json ...]
  --full: also compare each run against this one (a full survey): its ranges
          cover the quick sizes between its own.
"""
import itertools
import json
import sys

QUICK = [1, 64, 256, 512, 1024, 1400, 1460, 1500, 2048, 2800, 3072, 4096, 8192, 16384, 32768, 64000]


def load(path):
    with open(path) as f:
        text = f.read()
    # the JSON object is the last thing on stdout
    start = text.find("{")
    doc = json.loads(text[start:])
    return {n["network"].split(" (run")[0]: n for n in doc["networks"]}, doc.get("seconds")


def verdict(net, size):
    """('win', name) / ('tie', names) / None at this size."""
    left = {e["size"] for e in net.get("excluded", [])}
    if size in left:
        return None
    for b in net.get("best", []):
        if b["from"] <= size <= b["to"]:
            return ("tie", tuple(sorted(b["best"]))) if b["tie"] else ("win", b["best"][0])
    return None


def compare(a, b, sizes):
    rows, claimed, one_only, contra = [], 0, 0, 0
    for net in sorted(set(a) & set(b)):
        for s in sizes:
            va, vb = verdict(a[net], s), verdict(b[net], s)
            if va is None or vb is None:
                continue
            kinds = (va[0], vb[0])
            if "win" not in kinds:
                continue
            claimed += 1
            if kinds == ("win", "win"):
                if va[1] != vb[1]:
                    contra += 1
                    rows.append((net, s, va, vb, "CONTRADICTION"))
                continue
            win, tie = (va, vb) if va[0] == "win" else (vb, va)
            if win[1] in tie[1]:
                one_only += 1
                rows.append((net, s, va, vb, "one only"))
            else:
                contra += 1
                rows.append((net, s, va, vb, "CONTRADICTION"))
    return rows, claimed, one_only, contra


def words(v):
    return "-" if v is None else (v[1] if v[0] == "win" else "tie: " + " = ".join(v[1]))


def main(argv):
    sizes, full, files = QUICK, None, []
    it = iter(argv)
    for a in it:
        if a == "--sizes":
            sizes = [int(x) for x in next(it).split(",")]
        elif a == "--full":
            full = next(it)
        else:
            files.append(a)
    runs = [(f, *load(f)) for f in files]
    pairs = list(itertools.combinations(runs, 2))
    if full:
        fa = (full, *load(full))
        pairs += [(fa, r) for r in runs]
    bad = 0
    for (fa, a, ta), (fb, b, tb) in pairs:
        rows, claimed, one_only, contra = compare(a, b, sizes)
        bad += contra
        share = one_only / claimed if claimed else 0.0
        print(f"\n{fa} ({ta:.0f} s) vs {fb} ({tb:.0f} s): {claimed} sizes claimed, "
              f"{one_only} by one only ({share:.0%}), {contra} contradictions")
        for net, s, va, vb, what in rows:
            print(f"  {net:<14} {s:>6} B  {words(va):<28} {words(vb):<28} {what}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
