"""Writes safetensors files with the real `safetensors` package (numpy API) and a manifest.json
that records, for each tensor, its name, dtype, shape and zlib CRC-32, as Python sees them.

The C++ reader is tested against these (tests/test_safetensors.cpp), and `ccht weights --digest`
against the CRCs (tests/test_cli.cpp). Usage: write_fixtures.py OUT_DIR
"""
import json
import os
import sys
import zlib

import numpy as np
from safetensors.numpy import save_file

# Every dtype the numpy API can write, with the name the format gives it.
DTYPES = [
    (np.bool_, "BOOL"), (np.uint8, "U8"), (np.int8, "I8"), (np.int16, "I16"),
    (np.uint16, "U16"), (np.float16, "F16"), (np.int32, "I32"), (np.uint32, "U32"),
    (np.float32, "F32"), (np.float64, "F64"), (np.int64, "I64"), (np.uint64, "U64"),
]


def make(rng, dtype, shape):
    if dtype is np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return rng.standard_normal(size=shape).astype(dtype)


def main(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(7)
    files = []
    # One file with every dtype (and a scalar and an empty tensor), one larger model-like file.
    specs = {
        "all_dtypes.safetensors": [(f"t_{name.lower()}", dt, (3, 5)) for dt, name in DTYPES]
        + [("scalar", np.float32, ()), ("empty", np.int64, (0, 4))],
        "small_model.safetensors": [
            ("embeddings.word_embeddings.weight", np.float32, (1000, 64)),
            ("encoder.layer.0.attention.weight", np.float32, (64, 192)),
            ("encoder.layer.0.attention.bias", np.float32, (192,)),
            ("encoder.layer.0.norm.weight", np.float16, (64,)),
            ("position_ids", np.int64, (1, 512)),
        ],
    }
    for fname, tensors in specs.items():
        arrays = {name: make(rng, dt, shape) for name, dt, shape in tensors}
        meta = {"format": "np", "writer": "tests/weights/write_fixtures.py"}
        save_file(arrays, os.path.join(out, fname), metadata=meta)
        rows = []
        for name, dt, shape in tensors:
            a = np.ascontiguousarray(arrays[name])
            dtype_name = dict((d, n) for d, n in DTYPES)[dt]
            rows.append({"name": name, "dtype": dtype_name, "shape": list(shape),
                         "bytes": a.nbytes, "crc32": zlib.crc32(a.tobytes()) & 0xFFFFFFFF})
        files.append({"file": fname, "metadata": meta, "tensors": rows})
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump({"files": files}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
