#!/usr/bin/env python3
"""Plots of `ccht paper`: hit ratio and buckets per operation against the cache/table ratio.

usage: plot_paper.py PAPER.csv OUT_DIR   (writes OUT_DIR/paper_sweep.png)
"""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    rows = [r for r in csv.DictReader(open(sys.argv[1], newline=""))
            if r["workload"] == "zipfian" and float(r["queries"]) == 0.5]
    hit = defaultdict(list)
    acc = defaultdict(list)
    exact = None
    for r in rows:
        ratio = float(r["ratio"])
        if r["policy"] == "lru":
            exact = 1 - float(r["miss_ratio"])
            continue
        hit[r["policy"]].append((ratio, 1 - float(r["miss_ratio"])))
        acc[r["policy"]].append((ratio, float(r["buckets_per_op"])))
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for p in hit:
        pts = sorted(hit[p])
        a.plot([x for x, _ in pts], [y for _, y in pts], marker="o", ms=3, label=p)
        pts = sorted(acc[p])
        b.plot([x for x, _ in pts], [y for _, y in pts], marker="o", ms=3, label=p)
    if exact is not None:
        a.axhline(exact, color="gray", ls="--", label="exact lru")
    a.set_xlabel("cache/table ratio (capacity / slots)")
    a.set_ylabel("hit ratio")
    a.set_title("YCSB zipfian, 50% queries")
    b.set_xlabel("cache/table ratio (capacity / slots)")
    b.set_ylabel("buckets touched per operation")
    b.set_title("memory accesses")
    for ax in (a, b):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{sys.argv[2]}/paper_sweep.png", dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
