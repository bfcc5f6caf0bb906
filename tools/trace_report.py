#!/usr/bin/env python3
"""Miss-ratio report on the shared traces: ccht-lru against exact lru, fifo and lfu.

usage: trace_report.py CCHT_BINARY TRACES_DIR OUT_DIR

Runs `ccht replay --json` on every trace at the capacities of the traces README, writes
OUT_DIR/trace-report.md (a Markdown table with the gap of ccht-lru to exact lru in percentage
points) and OUT_DIR/trace_miss_ratio.png.
"""
import json
import os
import subprocess
import sys

TRACES = {
    "sprite.trace": [100, 500, 1000, 2000],
    "multi2.trace": [100, 500, 1000, 2000],
    "multi3.trace": [100, 500, 1000, 2000],
    "zigzag.trace": [100, 500, 1000, 2000],
    "loop.trace": [1000, 2000],
    "ps.trace": [100, 500, 2000],
    "2_pools.trace": [100, 500, 1000, 2000],
    "mooncake_synthetic.jsonl": [1000, 4000, 16000, 32000],
}
POLICIES = ["lru", "fifo", "lfu", "ccht-lru", "ccht-fifo", "ccht-lfu"]


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    ccht, traces_dir, out = sys.argv[1:]
    os.makedirs(out, exist_ok=True)
    rows = {}
    for trace, caps in TRACES.items():
        path = os.path.join(traces_dir, trace)
        cmd = [ccht, "replay", "--trace", path, "--json", "--policy", ",".join(POLICIES),
               "--capacity", ",".join(map(str, caps))]
        res = subprocess.run(cmd, capture_output=True, text=True, check=True)
        for line in res.stdout.splitlines():
            r = json.loads(line)
            rows.setdefault((trace, r["capacity"]), {})[r["policy"]] = r

    head = "| trace | capacity | " + " | ".join(POLICIES) + " | ccht-lru − lru (pp) |"
    lines = [head, "|---|---:|" + "---:|" * len(POLICIES) + "---:|"]
    worst = 0.0
    for (trace, cap), by in rows.items():
        gap = 100 * (by["ccht-lru"]["miss_ratio"] - by["lru"]["miss_ratio"])
        worst = max(worst, gap)
        cells = [f'{by[p]["miss_ratio"]:.4f}' for p in POLICIES]
        lines.append(f"| {trace} | {cap} | " + " | ".join(cells) + f" | {gap:+.2f} |")
    lines.append("")
    lines.append(f"Largest ccht-lru gap to exact lru: {worst:+.2f} percentage points.")
    with open(os.path.join(out, "trace-report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(TRACES)
    fig, axes = plt.subplots(2, 4, figsize=(16, 7))
    colors = {"lru": "tab:blue", "fifo": "tab:orange", "lfu": "tab:green"}
    for ax, trace in zip(axes.flat, names):
        caps = TRACES[trace]
        for p in POLICIES:
            base = p.split("-")[-1]
            ys = [rows[(trace, c)][p]["miss_ratio"] for c in caps]
            ax.plot(caps, ys, "-" if p.startswith("ccht-") else "--", marker="o", ms=3,
                    color=colors[base], label=p, alpha=0.85)
        ax.set_xscale("log")
        ax.set_title(trace, fontsize=9)
        ax.set_xlabel("capacity (objects)")
        ax.set_ylabel("miss ratio")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("Shared traces: ccht in-bucket policies (solid) vs exact policies (dashed)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "trace_miss_ratio.png"), dpi=100)
    return 0


if __name__ == "__main__":
    sys.exit(main())
