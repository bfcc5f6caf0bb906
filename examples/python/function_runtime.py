"""A small deep-learning function runtime on ccht's weight cache.

It writes two small models (MLPs) with the real `safetensors` package, then serves a stream of
invocations drawn from a skewed popularity. Each invocation loads its model's weights through
`ccht.WeightCache` (a lookup when they are resident, a load from the file when not) and runs the
forward pass on tensors that are views of the cache's own memory: NumPy matrix products, or
PyTorch when it is installed (torch.from_dlpack, still zero copy). Every output is checked
against the same forward pass on the arrays that were written. It reports cold and warm
latency (load + forward) and the hit ratio.

    .venv/bin/python examples/python/function_runtime.py [--invocations 40] [--json]

The budget holds one model but not both, so the stream evicts and reloads.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np
from safetensors.numpy import save_file

import ccht


def write_models(folder, hidden, layers, seed=0):
    rng = np.random.default_rng(seed)
    models = {}
    for name in ("summarizer", "classifier"):
        tensors = {}
        for i in range(layers):
            tensors[f"layers.{i}.weight"] = (rng.standard_normal((hidden, hidden)) /
                                             np.sqrt(hidden)).astype(np.float32)
            tensors[f"layers.{i}.bias"] = rng.standard_normal(hidden).astype(np.float32) * 0.1
        tensors["head.weight"] = rng.standard_normal((hidden, 8)).astype(np.float32)
        path = os.path.join(folder, f"{name}.safetensors")
        save_file(tensors, path, metadata={"model": name})
        models[name] = (path, tensors)
    return models


def forward(get, layers, x, backend):
    """The MLP: relu(x @ W + b) per layer, then the head. `get(name)` gives a tensor."""
    if backend == "torch":
        import torch

        h = torch.from_numpy(x)
        for i in range(layers):
            h = torch.relu(h @ get(f"layers.{i}.weight") + get(f"layers.{i}.bias"))
        return (h @ get("head.weight")).numpy()
    h = x
    for i in range(layers):
        h = np.maximum(h @ get(f"layers.{i}.weight") + get(f"layers.{i}.bias"), 0)
    return h @ get("head.weight")


def main(argv=None):
    ap = argparse.ArgumentParser(description="A function runtime on ccht.WeightCache")
    ap.add_argument("--invocations", type=int, default=40)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--zipf", type=float, default=1.2, help="popularity skew")
    ap.add_argument("--page-bytes", type=int, default=64 << 10)
    ap.add_argument("--backend", choices=["auto", "numpy", "torch"], default="auto",
                    help="forward pass with NumPy or PyTorch (auto: torch when installed)")
    ap.add_argument("--json", action="store_true", help="one JSON line instead of text")
    a = ap.parse_args(argv)

    backend = a.backend
    if backend == "auto":
        try:
            import torch  # noqa: F401
            backend = "torch"
        except ImportError:
            backend = "numpy"

    with tempfile.TemporaryDirectory() as folder:
        models = write_models(folder, a.hidden, a.layers)
        model_bytes = max(sum(t.nbytes for t in ts.values()) for _, ts in models.values())
        pages_per_model = sum(-(-t.nbytes // a.page_bytes) for t in models["summarizer"][1].values())
        budget = (pages_per_model + pages_per_model // 2) * a.page_bytes  # one model, not both
        cache = ccht.WeightCache(budget_bytes=budget, page_bytes=a.page_bytes)
        names = list(models)
        weights = np.array([1 / (i + 1) ** a.zipf for i in range(len(names))])
        rng = np.random.default_rng(7)
        x = rng.standard_normal((4, a.hidden)).astype(np.float32)
        expected = {n: forward(lambda k, ts=ts: ts[k], a.layers, x, "numpy")
                    for n, (_, ts) in models.items()}

        if backend == "torch":
            import torch

            view = torch.from_dlpack
        else:
            view = np.from_dlpack
        cold, warm, wrong = [], [], 0
        for _ in range(a.invocations):
            name = names[rng.choice(len(names), p=weights / weights.sum())]
            t0 = time.perf_counter()
            with cache.load(models[name][0]) as model:
                y = forward(lambda k: view(model[k]), a.layers, x, backend)
            seconds = time.perf_counter() - t0
            (warm if model.report["warm"] else cold).append(seconds)
            if not np.allclose(y, expected[name], rtol=1e-4, atol=1e-4):
                wrong += 1
        stats = cache.stats()

    result = {
        "invocations": a.invocations, "forward": backend, "models": len(names),
        "model_bytes": int(model_bytes), "budget_bytes": budget,
        "hits": len(warm), "misses": len(cold),
        "hit_ratio": len(warm) / max(1, a.invocations),
        "cold_ms_median": statistics.median(cold) * 1e3 if cold else None,
        "warm_ms_median": statistics.median(warm) * 1e3 if warm else None,
        "pages_evicted": stats["pages_evicted"], "wrong_outputs": wrong,
        "objects_pinned_after": stats["objects_pinned"],
    }
    if a.json:
        print(json.dumps(result))
    else:
        print(f"function runtime: {a.invocations} invocations of {len(names)} models "
              f"({model_bytes / 2**20:.1f} MiB each, budget {budget / 2**20:.1f} MiB), "
              f"forward pass with {backend}")
        print(f"  hit ratio {result['hit_ratio']:.2f}; cold (load + forward) median "
              f"{result['cold_ms_median'] or 0:.2f} ms, warm median {result['warm_ms_median'] or 0:.2f} ms; "
              f"{stats['pages_evicted']} pages evicted; {wrong} wrong outputs")
    return 1 if wrong or stats["objects_pinned"] else 0


if __name__ == "__main__":
    sys.exit(main())
