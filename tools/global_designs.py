#!/usr/bin/env python3
"""Every victim search of the global layer, side by side (docs/global-layer.md).

usage: global_designs.py CCHT_BINARY TRACES_DIR OUT_DIR [--quick] [--no-speed] [--designs "A;B"]

For each design (a victim search and its setting) it runs, with the same binary:
  * `ccht replay` of every shared trace at the capacities of the traces README (29 cells),
    ccht-double-lru at cache/table ratio 0.9 against exact lru: worst and mean gap in
    percentage points, cells above 0.5 points, and the mean over cells of buckets per insert
    and per operation;
  * `ccht compare` (default workloads, batch 1): requests/s of ccht-lru, ccht-double-lru and
    cht-lru, summed over workloads and capacities;
  * `ccht bench --op insert --batch 1048576 --threads 2 --policy ccht-lru,ccht-double-lru,cht-lru`.
It writes OUT_DIR/designs.md (the Markdown table), OUT_DIR/designs.jsonl (one object per
design) and OUT_DIR/global_tradeoff.png (worst gap against buckets per insert). --quick skips
the two throughput runs' default sizes for smaller ones (a smoke test, not a measurement).
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trace_report import TRACES  # noqa: E402  (the 29 cells of the traces README)

# (label, family, CLI arguments). The family groups points into one curve of the plot.
DESIGNS = [
    ("sampled, 8 buckets", "sampled", ["--global-search", "sampled", "--global-samples", "8"]),
    ("tail index, 1 line", "tail index", ["--global-search", "tail-index", "--global-samples", "16"]),
    ("tail index, 2 lines", "tail index", ["--global-search", "tail-index", "--global-samples", "32"]),
    ("tail index, 4 lines", "tail index", ["--global-search", "tail-index", "--global-samples", "64"]),
    ("two-level, 1 window", "two-level", ["--global-search", "two-level", "--global-samples", "256"]),
    # The default's searches alone: large batches search too (table_options::bulk_victim_select
    # off). Only the batch-2^20 bench differs; replays and compare run batches of one.
    ("two-level, 1 window, no bulk select", "two-level",
     ["--global-search", "two-level", "--global-samples", "256", "--no-bulk-select"]),
    ("two-level, 2 windows", "two-level", ["--global-search", "two-level", "--global-samples", "512"]),
    ("two-level, 4 windows", "two-level", ["--global-search", "two-level", "--global-samples", "1024"]),
    ("own-first, slack 0", "own-first", ["--global-search", "own-first", "--own-slack", "0"]),
    ("own-first, slack 8", "own-first", ["--global-search", "own-first", "--own-slack", "8"]),
    ("own-first, slack 16", "own-first", ["--global-search", "own-first", "--own-slack", "16"]),
    ("own-first, slack 64", "own-first", ["--global-search", "own-first", "--own-slack", "64"]),
]


def run_json(cmd):
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr}")
    return [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]


def quality(ccht, traces_dir, args):
    gaps, bpi, bpo = [], [], []
    for trace, caps in TRACES.items():
        path = os.path.join(traces_dir, trace)
        rows = run_json([ccht, "replay", "--trace", path, "--json", "--policy",
                         "lru,ccht-double-lru", "--slots-ratio", "0.9", "--capacity",
                         ",".join(map(str, caps))] + args)
        by = {}
        for r in rows:
            by.setdefault(r["capacity"], {})[r["policy"]] = r
        for cap in caps:
            d = by[cap]["ccht-double-lru"]
            gaps.append(100 * (d["miss_ratio"] - by[cap]["lru"]["miss_ratio"]))
            bpi.append(d["buckets_per_insert"])
            bpo.append(d["buckets_per_op"])
    return {
        "cells": len(gaps),
        "worst_gap_pp": max(gaps),
        "mean_gap_pp": sum(gaps) / len(gaps),
        "cells_above_half_pp": sum(g > 0.5 for g in gaps),
        "buckets_per_insert": sum(bpi) / len(bpi),
        "buckets_per_op": sum(bpo) / len(bpo),
    }


def speed(ccht, out, args, quick):
    policies = "ccht-lru,ccht-double-lru,cht-lru"
    cmp_dir = os.path.join(out, "compare-tmp")
    size = ["--keys", "20000", "--requests", "100000"] if quick else []
    subprocess.run([ccht, "compare", "--policy", policies, "--batch", "1", "--no-plot", "--out",
                    cmp_dir] + size + args, capture_output=True, text=True, check=True)
    req, sec = {}, {}
    with open(os.path.join(cmp_dir, "compare.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            req[r["policy"]] = req.get(r["policy"], 0) + r["requests"]
            sec[r["policy"]] = sec.get(r["policy"], 0) + r["seconds"]
    compare = {p: req[p] / sec[p] / 1e6 for p in req}
    bench_size = ["--slots", "262144", "--batch", "65536", "--repeat", "1"] if quick else [
        "--batch", "1048576", "--repeat", "3"]
    rows = run_json([ccht, "bench", "--op", "insert", "--threads", "2", "--json", "--policy",
                     policies] + bench_size + args)
    bench = {r["policy"]: r["ops_per_s"] / 1e6 for r in rows}
    bench_bpo = {r["policy"]: r["buckets_per_op"] for r in rows}
    return {"compare_mreq_s": compare, "bench_insert_mops_s": bench,
            "bench_buckets_per_insert": bench_bpo}


def table(results, with_speed):
    head = ["design", "worst gap (pp)", "mean gap (pp)", "cells > 0.5 pp", "buckets/insert",
            "buckets/op"]
    if with_speed:
        head += ["compare batch 1: double / ccht-lru (Mreq/s)",
                 "bench insert 2^20: double / ccht-lru (Mops/s)"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for r in results:
        cells = [r["design"], f'{r["worst_gap_pp"]:+.2f}', f'{r["mean_gap_pp"]:+.3f}',
                 str(r["cells_above_half_pp"]), f'{r["buckets_per_insert"]:.2f}',
                 f'{r["buckets_per_op"]:.2f}']
        if with_speed:
            c, b = r["compare_mreq_s"], r["bench_insert_mops_s"]
            cells.append(f'{c["ccht-double-lru"] / c["ccht-lru"]:.2f}x '
                         f'({c["ccht-double-lru"]:.2f} / {c["ccht-lru"]:.2f}; cht-lru {c["cht-lru"]:.2f})')
            cells.append(f'{b["ccht-double-lru"] / b["ccht-lru"]:.2f}x '
                         f'({b["ccht-double-lru"]:.2f} / {b["ccht-lru"]:.2f}; cht-lru {b["cht-lru"]:.2f})')
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    families = []
    for r in results:
        if r["family"] not in families:
            families.append(r["family"])
    for fi, fam in enumerate(families):
        pts = sorted((r["buckets_per_insert"], r["worst_gap_pp"], r["design"])
                     for r in results if r["family"] == fam)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=fam)
        for x, y, name in pts:
            ax.annotate(name.split(", ", 1)[-1], (x, y), textcoords="offset points",
                        xytext=[(4, 4), (4, 4), (4, -11), (-42, 4)][fi % 4], fontsize=7)
    ax.axhline(0.30, color="grey", linestyle=":", linewidth=1)
    ax.axvline(4.0, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("buckets per insert (mean over the 29 cells)")
    ax.set_ylabel("worst gap to exact LRU (percentage points)")
    ax.set_title("Global victim searches: quality against cost (ratio 0.9)")
    ax.set_ylim(bottom=min(0.0, min(r["worst_gap_pp"] for r in results)))
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ccht")
    ap.add_argument("traces")
    ap.add_argument("out")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--designs", help="semicolon-separated labels (default: all)")
    a = ap.parse_args()
    if not os.path.isdir(a.traces):
        print(f"global_designs: {a.traces} is absent: nothing measured", file=sys.stderr)
        return 0
    os.makedirs(a.out, exist_ok=True)
    chosen = DESIGNS if not a.designs else [d for d in DESIGNS if d[0] in a.designs.split(";")]
    if not chosen:
        sys.exit("global_designs: no design matches --designs; known: " +
                 "; ".join(d[0] for d in DESIGNS))
    results = []
    for label, family, args in chosen:
        r = {"design": label, "family": family, "args": args}
        r.update(quality(a.ccht, a.traces, args))
        if not a.no_speed:
            r.update(speed(a.ccht, a.out, args, a.quick))
        results.append(r)
        print(json.dumps(r), file=sys.stderr, flush=True)
    with open(os.path.join(a.out, "designs.jsonl"), "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    md = table(results, not a.no_speed)
    with open(os.path.join(a.out, "designs.md"), "w") as f:
        f.write(md)
    print(md)
    try:
        plot(results, os.path.join(a.out, "global_tradeoff.png"))
    except ImportError:
        print("global_designs: matplotlib is absent: no plot", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
