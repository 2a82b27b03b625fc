#!/usr/bin/env python3
"""Best and median of ab.sh's JSON lines per kernels mode: prefill and decode tok/s."""
import json, statistics, sys

rows = {}
for line in open(sys.argv[1]):
    if line.startswith('{'):
        r = json.loads(line)
        rows.setdefault(r['kernels'], []).append(r)
print('| kernels | 16-bit set | runs | prefill tok/s best | median | decode tok/s best | median |')
print('|---|---|---|---|---|---|---|')
def f(v):
    return f"{v:,.1f}" if v < 100 else f"{v:,.0f}"


for k, rs in rows.items():
    p = [r['prefill_tok_s'] for r in rs]
    d = [r['decode_tok_s'] for r in rs]
    print(f"| {k} | {rs[0]['isa_16bit']} | {len(rs)} | {f(max(p))} | {f(statistics.median(p))} | "
          f"{f(max(d))} | {f(statistics.median(d))} |")
