"""Shared fixtures of the Python package's tests (tests/python, run by tools/dev.sh test).

The tests import the installed package (``pip install .`` into .venv), or the build tree's when
PYTHONPATH points at <build>/bindings/python (the `python` CMake preset).
"""

import pathlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def write_model(path, tensors, metadata=None):
    """Writes a safetensors file with the real safetensors package; returns the path."""
    from safetensors.numpy import save_file

    save_file(tensors, str(path), metadata=metadata)
    return str(path)


def write_raw_model(path, tensors):
    """Writes a safetensors file of raw tensors {name: (dtype, shape, bytes)} with the package's
    own serializer, for dtypes NumPy lacks. dtype is the package's name ('bfloat16',
    'float8_e4m3fn', 'float8_e5m2'); the file spells them BF16, F8_E4M3, F8_E5M2."""
    from safetensors import TensorSpec, serialize_file

    keep = {n: np.frombuffer(b, dtype=np.uint8).copy() for n, (_, _, b) in tensors.items()}
    specs = {n: TensorSpec(dtype=d, shape=list(s), data_ptr=keep[n].ctypes.data,
                           data_len=keep[n].nbytes)
             for n, (d, s, _) in tensors.items()}
    serialize_file(specs, str(path))
    return str(path)
