"""The CUDA backend from Python: the same calls with backend="cuda", views on the GPU
(__dlpack_device__ is (2, device)). Skips where this build has no CUDA backend or no GPU."""

import numpy as np
import pytest

import ccht

pytestmark = pytest.mark.skipif(
    not ccht.cuda_available(),
    reason="no GPU here (or a build without CUDA): the CUDA backend's Python calls untested")
U64 = np.uint64


def test_cuda_table_host_arrays_match_the_cpu_table():
    keys = np.arange(1, 50_001, dtype=U64)
    g = ccht.Table(slots=1 << 16, policy="double-lru", capacity=40_000, backend="cuda")
    ek, ev = g.insert(keys, keys * U64(5))
    assert isinstance(ek, np.ndarray) and (ev == ek * U64(5)).all()
    assert len(g) + len(ek) == len(keys) and len(g) <= 40_000
    vals, found = g.find(keys)
    assert found.sum() == len(g) and (vals[found] == keys[found] * U64(5)).all()


def test_cuda_table_device_arrays_stay_on_the_device():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: CUDA DLPack inputs untested")
    keys = torch.arange(1, 1001, dtype=torch.uint64, device="cuda")
    g = ccht.Table(slots=1 << 12, backend="cuda")
    g.insert(keys, keys)
    vals, found = g.find(keys)
    assert vals.__dlpack_device__()[0] == 2
    assert torch.from_dlpack(found).all()


def test_cuda_page_and_weight_views_are_device_memory(tmp_path):
    pc = ccht.PageCache(num_pages=16, page_bytes=65536, backend="cuda")
    with pc.acquire(np.array([1, 2], dtype=U64)) as lease:
        assert lease.view(0).__dlpack_device__()[0] == 2
        lease.publish()
    from safetensors.numpy import save_file

    a = np.arange(1 << 16, dtype=np.float32)
    save_file({"a": a}, str(tmp_path / "m.safetensors"))
    wc = ccht.WeightCache(budget_bytes=8 << 20, page_bytes=2 << 20, backend="cuda")
    with wc.load(str(tmp_path / "m.safetensors")) as m:
        assert m["a"].__dlpack_device__()[0] == 2
        assert m.report["bytes_read"] == a.nbytes
