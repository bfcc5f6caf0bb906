#!/usr/bin/env python3
"""Draws the plots of `ccht compare` from its CSV: miss-ratio curves and a throughput chart.

usage: plot_results.py RESULTS.csv OUT_DIR

Writes OUT_DIR/miss_ratio.png (one panel per workload or trace: miss ratio against capacity, a
line per policy) and OUT_DIR/throughput.png (requests per second per policy). The C++ side only
writes data; this script only draws it.
"""
import csv
import math
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


COLORS = {"lru": "tab:blue", "fifo": "tab:orange", "lfu": "tab:green"}


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    path, out = sys.argv[1], sys.argv[2]
    rows = list(csv.DictReader(open(path, newline="")))
    if not rows:
        print(f"{path}: no rows", file=sys.stderr)
        return 1

    curves = defaultdict(lambda: defaultdict(list))  # trace -> policy -> [(capacity, ratio)]
    speed = defaultdict(lambda: [0.0, 0.0])  # policy -> [requests, seconds]
    for r in rows:
        curves[r["trace"]][r["policy"]].append((int(r["capacity"]), float(r["miss_ratio"])))
        speed[r["policy"]][0] += float(r["requests"]) + float(r["updates"])
        speed[r["policy"]][1] += float(r["seconds"])

    traces = list(curves)
    cols = min(3, len(traces))
    nrows = math.ceil(len(traces) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 3.8 * nrows), squeeze=False)
    for ax, trace in zip(axes.flat, traces):
        for policy, pts in curves[trace].items():
            pts.sort()
            base = policy.split("-")[-1]  # ccht-lru and lru share a colour
            color = COLORS.get(base, None)
            style = "-" if policy.startswith("ccht-") else "--"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", ms=3,
                    color=color, label=policy, alpha=0.85)
        ax.set_xscale("log")
        ax.set_title(trace, fontsize=8)
        ax.set_xlabel("capacity (objects)")
        ax.set_ylabel("miss ratio")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(traces):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("Miss ratio: ccht in-bucket policies (solid) vs exact policies (dashed)")
    fig.tight_layout()
    fig.savefig(f"{out}/miss_ratio.png", dpi=110)

    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    names = list(speed)
    rates = [speed[n][0] / speed[n][1] / 1e6 if speed[n][1] > 0 else 0 for n in names]
    ax.bar(names, rates, color=["tab:blue" if n.startswith("ccht-") else "tab:gray" for n in names])
    ax.set_ylabel("million requests / s")
    ax.set_title("Replay throughput (ccht-*: one table call per batch)")
    ax.tick_params(axis="x", labelrotation=30)
    fig.tight_layout()
    fig.savefig(f"{out}/throughput.png", dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
