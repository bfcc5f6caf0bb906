"""Python bulk find of 2^20 keys against the same C++ call, in one process and one run
(issue 11's goal: within 1.2x). Prints a Markdown table and, with --json, one JSON line.

    .venv/bin/python bench/python/bench_find.py [--keys 1048576] [--reps 30] [--json]

The table holds 2^20 keys at a 0.9 fill (double LRU, capacity 0.9 x slots) and every lookup
hits. "C++" is ccht::table::find on the same keys into buffers allocated once
(Table._time_find, the GIL released); "Python" is `t.find(keys)` as a user calls it, which
allocates its two result arrays, and `t.find_into(...)`, which reuses the caller's.
"""

import argparse
import datetime
import json
import platform
import statistics
import time

import numpy as np

import ccht


def median_seconds(fn, reps):
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=1 << 20)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--policy", default="double-lru")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    n = a.keys
    slots = int(n / 0.9) + 16
    t = ccht.Table(slots=slots, policy=a.policy, capacity=n if a.policy in ("double-lru", "coarse-lru") else 0)
    rng = np.random.default_rng(1)
    keys = rng.choice(1 << 62, size=n, replace=False).astype(np.uint64) + np.uint64(1)
    ek, _ = t.insert(keys, keys)
    resident = keys if len(ek) == 0 else keys[np.isin(keys, ek, invert=True)]
    np.random.default_rng(2).shuffle(resident)
    vals, found = t.find(resident)
    assert found.all() and (vals == resident).all()

    out_v = np.empty(len(resident), np.uint64)
    out_f = np.empty(len(resident), bool)
    # Interleave the three so drift (frequency, other load) hits them alike.
    cpp, py, py_into = [], [], []
    for _ in range(a.reps):
        cpp.append(statistics.median(t._time_find(resident, 1)))
        py.append(median_seconds(lambda: t.find(resident), 1))
        py_into.append(median_seconds(lambda: t.find_into(resident, out_v, out_f), 1))
    c, p, pi = statistics.median(cpp), statistics.median(py), statistics.median(py_into)
    row = {
        "keys": len(resident), "policy": a.policy, "reps": a.reps,
        "cpp_seconds": c, "python_seconds": p, "python_into_seconds": pi,
        "python_over_cpp": p / c, "python_into_over_cpp": pi / c,
        "cpp_mkeys_per_s": len(resident) / c / 1e6,
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores",
        "date": datetime.date.today().isoformat(), "ccht": ccht.__version__,
    }
    if a.json:
        print(json.dumps(row))
    else:
        print(f"| keys | C++ find | Python find | ratio | Python find_into | ratio |")
        print(f"|---|---|---|---|---|---|")
        print(f"| {row['keys']} | {c * 1e3:.2f} ms ({row['cpp_mkeys_per_s']:.1f} Mkeys/s) | "
              f"{p * 1e3:.2f} ms | {p / c:.3f}x | {pi * 1e3:.2f} ms | {pi / c:.3f}x |")


if __name__ == "__main__":
    main()
