"""What bench/compare.py and bench/stream_compare.py share: reading a work
directory's files. Standard library only."""

import os


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
