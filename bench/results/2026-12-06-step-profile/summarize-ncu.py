#!/usr/bin/env python3
"""Per-kernel totals of ncu CSVs (gpu__time_duration.sum, one graph decode step each).

usage: summarize-ncu.py [--by-grid] CSV... ; prints, per file, each kernel name's count, total
and mean in microseconds, largest total first, and the step's serialized total (ncu runs the
kernels one at a time with caches flushed: no PDL overlap, so the sum exceeds the graph's step
time). --by-grid: one line per kernel name and grid size, which tells apart the launches of
one kernel on different shapes (a GEMV's qkv, o and lm_head).
"""
import collections
import csv
import re
import sys

SCALE = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}

by_grid = "--by-grid" in sys.argv[1:]
for path in [a for a in sys.argv[1:] if a != "--by-grid"]:
    header, totals = None, collections.OrderedDict()
    for row in csv.reader(open(path)):
        if row and row[0] == "ID":
            header = row
            continue
        if header is None or len(row) != len(header):
            continue
        d = dict(zip(header, row))
        if d.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = d["Kernel Name"].replace("<unnamed>::", "").replace("(anonymous namespace)::", "")
        name = re.sub(r"\(.*", "", name)
        name = re.sub(r"^void ", "", name)
        name = re.sub(r"<.*", "", name)[:48]
        if by_grid:
            name = f"{name[:34]} {d.get('Grid Size', '')}"[:48]
        us = float(d["Metric Value"].replace(",", "")) * SCALE.get(d["Metric Unit"], 1e-3)
        entry = totals.setdefault(name, [0, 0.0])
        entry[0] += 1
        entry[1] += us
    step = sum(v for _, v in totals.values())
    print(f"== {path}: {sum(n for n, _ in totals.values())} kernels, {step:.1f} us serialized")
    print(f"  {'kernel':48s} {'calls':>5s} {'total us':>10s} {'mean us':>8s} {'share':>6s}")
    for name, (n, us) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        print(f"  {name:48s} {n:5d} {us:10.1f} {us / n:8.2f} {us / step:6.1%}")
