#!/usr/bin/env python3
"""Draws bench/copy-cern-icepp.sh's table as an SVG: MB/s against the
buffer size, a line per stream count, beside the CERN-Tokyo study's bbftp
figures (Table 3, dashed). Standard library only.

    python3 bench/copy_table_plot.py TABLE.txt OUT.svg

An INVALID point (the lab fell behind on every try) is left out of its
line, not drawn as zero.
"""
import sys

# the study's Table 3 (bbftp, Linux 2.6, disk to disk, MB/s); None: not measured
STUDY = {1: [20.0, 26.4, 27.8], 2: [24.4, 20.8, None], 4: [19.0, 19.3, None]}
COLOURS = {1: "#1f77b4", 2: "#d62728", 4: "#2ca02c"}


def read(path):
    lines = [l.rstrip("\n") for l in open(path) if l.strip()]
    buffers = lines[0].split()[::2]  # "8 MB 16 MB 32 MB" -> 8, 16, 32
    rows = {}
    for l in lines[1:]:
        f = l.split()
        if len(f) < 2 or not f[0].isdigit() or not f[1].startswith("stream"):
            continue
        rows[int(f[0])] = [None if x == "INVALID" else float(x) for x in f[2:]]
    return [int(b) for b in buffers], rows


def svg(buffers, rows):
    w, h, left, right, top, bottom = 640, 400, 60, 170, 30, 50
    top_y = max([v for r in rows.values() for v in r if v is not None] + [28.0]) * 1.1
    x = lambda i: left + i * (w - left - right) / max(1, len(buffers) - 1)
    y = lambda v: h - bottom - v / top_y * (h - top - bottom)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<text x="{left}" y="18" font-size="14">gridperf copy across cern-icepp (1 Gbit/s, 270 ms), MB/s</text>',
           f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>',
           f'<text x="{(w - right + left) / 2}" y="{h - 12}" text-anchor="middle">buffer (-w), MB</text>']
    step = 20 if top_y > 60 else 10
    for v in range(0, int(top_y) + 1, step):
        out.append(f'<line x1="{left - 4}" y1="{y(v):.1f}" x2="{w - right}" y2="{y(v):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{v}</text>')
    for i, b in enumerate(buffers):
        out.append(f'<text x="{x(i):.1f}" y="{h - bottom + 18}" text-anchor="middle">{b}</text>')
    legend = 0
    for p in sorted(rows):
        for name, vals, dash in ((f"gridperf, {p} stream{'s' if p > 1 else ''}", rows[p], ""),
                                 (f"bbftp 2004, {p} stream{'s' if p > 1 else ''}", STUDY.get(p, []), ' stroke-dasharray="5,4"')):
            pts = [(x(i), y(v)) for i, v in enumerate(vals) if v is not None]
            c = COLOURS.get(p, "black")
            if len(pts) > 1:
                out.append(f'<polyline fill="none" stroke="{c}" stroke-width="2"{dash} points="'
                           + " ".join(f"{a:.1f},{b:.1f}" for a, b in pts) + '"/>')
            for a, b in pts:
                out.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{c}"/>')
            ly = top + 10 + legend * 18
            out.append(f'<line x1="{w - right + 10}" y1="{ly}" x2="{w - right + 34}" y2="{ly}" stroke="{c}" stroke-width="2"{dash}/>')
            out.append(f'<text x="{w - right + 40}" y="{ly + 4}">{name}</text>')
            legend += 1
    out.append("</svg>")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: copy_table_plot.py TABLE.txt OUT.svg")
    buffers, rows = read(sys.argv[1])
    if not rows:
        sys.exit(f"copy_table_plot: no rows of MB/s in {sys.argv[1]}")
    open(sys.argv[2], "w").write(svg(buffers, rows))
