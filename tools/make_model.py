"""Writes a model-like safetensors file with the real `safetensors` package, for `ccht weights`.

    .venv/bin/python tools/make_model.py OUT.safetensors --mb 100 [--tensors 24] [--seed 1]

Three quarters of the tensors are large F32/F16 matrices, the rest small F32 vectors (biases and
norms), about --mb megabytes (10^6 bytes) in all.
"""
import argparse

import numpy as np
from safetensors.numpy import save_file


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--mb", type=float, default=100)
    p.add_argument("--tensors", type=int, default=24)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    rng = np.random.default_rng(a.seed)
    big = max(1, a.tensors - a.tensors // 4)
    per = int(a.mb * 1e6) // big
    arrays = {}
    for t in range(a.tensors):
        if t >= big:
            arrays[f"layers.{t}.norm.bias"] = rng.standard_normal(768).astype(np.float32)
        else:
            dt = np.float16 if t % 5 == 4 else np.float32
            rows = max(1, per // (1024 * np.dtype(dt).itemsize))
            arrays[f"layers.{t}.weight"] = rng.standard_normal((rows, 1024)).astype(dt)
    save_file(arrays, a.out, metadata={"generator": "tools/make_model.py"})


if __name__ == "__main__":
    main()
