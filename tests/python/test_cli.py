"""`python -m ccht weights` prints the JSON lines of `ccht weights` (the same C++ code); its
digest CRCs are zlib's of the file's bytes."""

import json
import os
import shutil
import subprocess
import sys
import zlib

import numpy as np
import pytest

from conftest import ROOT, write_model


def run_py(*args):
    return subprocess.run([sys.executable, "-m", "ccht", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def model(tmp_path, rng):
    tensors = {"emb": rng.standard_normal((256, 64)).astype(np.float32),
               "ids": np.arange(1000, dtype=np.int64), "flag": np.array([True, False])}
    return write_model(tmp_path / "m.safetensors", tensors), tensors


def test_weights_digest_matches_the_file(model):
    path, tensors = model
    r = run_py("weights", "--file", path, "--budget", "1MiB", "--page-bytes", "4KiB",
               "--invocations", "5", "--digest")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    summary, rows = lines[0], lines[1:]
    for key in ("loads", "hits", "misses", "bytes_loaded", "load_gbps", "warm_load_seconds",
                "cold_load_seconds"):
        assert key in summary
    assert summary["loads"] == 5 and summary["misses"] == 1 and summary["verify_failures"] == 0
    assert {r["name"] for r in rows} == set(tensors)
    dtypes = {"emb": "F32", "ids": "I64", "flag": "BOOL"}
    for row in rows:
        want = tensors[row["name"]]
        assert row["crc32"] == zlib.crc32(want.tobytes())
        assert row["dtype"] == dtypes[row["name"]] and row["shape"] == list(want.shape)
        assert row["bytes"] == want.nbytes and row["file"] == path


def test_same_lines_as_the_cpp_cli(model):
    path, _ = model
    cli = os.environ.get("CCHT_CLI") or shutil.which("ccht") or str(ROOT / "build/cpu/tools/ccht")
    if not os.path.exists(cli):
        pytest.skip(f"the C++ CLI is not built ({cli}); set CCHT_CLI to compare")
    args = ["weights", "--file", path, "--budget", "1MiB", "--page-bytes", "4KiB",
            "--invocations", "4", "--digest", "--json"]
    c = subprocess.run([cli, *args], capture_output=True, text=True, timeout=120)
    p = run_py(*args)
    assert c.returncode == 0 and p.returncode == 0, (c.stderr, p.stderr)
    cl, pl = c.stdout.splitlines(), p.stdout.splitlines()
    assert cl[1:] == pl[1:], "digest lines differ"
    cs, ps = json.loads(cl[0]), json.loads(pl[0])
    assert cs.keys() == ps.keys()
    timing = {k for k in cs if "seconds" in k or "gbps" in k or "speedup" in k or "fraction" in k}
    assert {k: v for k, v in cs.items() if k not in timing} == \
           {k: v for k, v in ps.items() if k not in timing}


def test_errors_are_clear(tmp_path, model):
    path, _ = model
    r = run_py("weights", "--file", path, "--budget", "12parsecs")
    assert r.returncode == 2 and "--budget: expected a positive size" in r.stderr
    r = run_py("weights", "--file", str(tmp_path / "nope.safetensors"), "--budget", "1MiB")
    assert r.returncode == 2 and "no such file" in r.stderr
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x01\x00")
    r = run_py("weights", "--file", str(bad), "--budget", "1MiB", "--page-bytes", "4KiB")
    assert r.returncode == 2 and str(bad) in r.stderr
    r = run_py("frobnicate")
    assert r.returncode == 2 and "unknown command" in r.stderr
