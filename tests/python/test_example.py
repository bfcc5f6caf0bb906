"""examples/python/function_runtime.py at a small size: it exits 0 only when every forward pass
on the cache's views matched the reference and no pin was left behind."""

import json
import subprocess
import sys

import pytest

from conftest import ROOT

EXAMPLE = ROOT / "examples" / "python" / "function_runtime.py"


def run(*args):
    r = subprocess.run([sys.executable, str(EXAMPLE), "--invocations", "16", "--hidden", "128",
                        "--layers", "3", "--page-bytes", "16384", "--json", *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def test_example_numpy():
    out = run("--backend", "numpy")
    assert out["invocations"] == 16 and out["hits"] + out["misses"] == 16
    assert out["misses"] >= 2 and out["hits"] >= 1, out
    assert out["wrong_outputs"] == 0 and out["objects_pinned_after"] == 0


def test_example_torch():
    pytest.importorskip("torch", reason="PyTorch is not installed: the torch forward pass untested")
    out = run("--backend", "torch")
    assert out["forward"] == "torch" and out["wrong_outputs"] == 0
