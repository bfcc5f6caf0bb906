"""ccht.WeightCache from Python, on files the real safetensors package writes: every tensor
viewed in place (DLPack, read-only) equals the file's, an object lease's fill is written in place,
pins follow the views, and a released object is never reachable through a stale view."""

import gc
import os
import threading
import zlib

import numpy as np
import pytest

import ccht
from conftest import write_model, write_raw_model

PAGE = 4096


def all_numpy_dtypes(rng):
    shapes = {"bool": (3, 5), "uint8": (4097,), "int8": (2, 3, 4), "int16": (100,),
              "uint16": (7, 9), "float16": (33, 65), "int32": (1000,), "uint32": (5, 5),
              "float32": (300, 17), "float64": (2,), "int64": (3, 1000), "uint64": (1,)}
    out = {}
    for name, shape in shapes.items():
        dt = np.dtype(name)
        if dt == np.bool_:
            a = rng.integers(0, 2, size=shape).astype(bool)
        elif dt.kind == "f":
            a = rng.standard_normal(size=shape).astype(dt)
        else:
            a = rng.integers(np.iinfo(dt).min, np.iinfo(dt).max, size=shape, dtype=dt,
                             endpoint=True)
        out["t." + name] = a
    out["t.scalar"] = np.array(2.5, dtype=np.float32)
    out["t.empty"] = np.zeros((0, 4), dtype=np.float32)
    return out


@pytest.mark.parametrize("layout", ["per-tensor", "packed"])
def test_every_dtype_in_place(tmp_path, rng, layout):
    tensors = all_numpy_dtypes(rng)
    path = write_model(tmp_path / "m.safetensors", tensors, metadata={"format": "np"})
    wc = ccht.WeightCache(budget_bytes=256 * PAGE, page_bytes=PAGE)
    with wc.load(path, layout=layout) as model:
        assert set(model) == set(tensors) and len(model) == len(tensors)
        for name, want in tensors.items():
            got = np.from_dlpack(model[name])
            assert got.dtype == want.dtype and got.shape == want.shape, name
            assert np.array_equal(got, want), name
            raw = np.from_dlpack(model.raw(name))
            assert raw.tobytes() == want.tobytes()
            info = model.info(name)
            assert info["shape"] == want.shape and info["bytes"] == want.nbytes
        assert model.report["fills"] >= 1 and not model.report["warm"]
        del got, raw
    with wc.load(path, layout=layout) as again:
        assert again.report["warm"] and again.report["bytes_read"] == 0


def test_bf16_and_f8_are_exported_with_their_dlpack_types(tmp_path, rng):
    raw = {n: rng.integers(0, 256, size=b, dtype=np.uint8).tobytes()
           for n, b in (("bf", 2 * 12), ("e4", 10), ("e5", 6))}
    path = write_raw_model(tmp_path / "r.safetensors",
                           {"bf": ("bfloat16", (3, 4), raw["bf"]),
                            "e4": ("float8_e4m3fn", (10,), raw["e4"]),
                            "e5": ("float8_e5m2", (2, 3), raw["e5"])})
    wc = ccht.WeightCache(budget_bytes=64 * PAGE, page_bytes=PAGE)
    with wc.load(path) as model:
        for n in raw:
            assert np.from_dlpack(model.raw(n)).tobytes() == raw[n]
        assert model.info("bf")["dtype"] == "BF16" and model.info("e4")["dtype"] == "F8_E4M3"
        with pytest.raises((BufferError, TypeError, ValueError, RuntimeError)):
            np.from_dlpack(model["bf"])  # NumPy has no bfloat16; torch does (below)


def test_zero_copy_and_read_only(tmp_path):
    a = np.arange(10_000, dtype=np.float32)
    path = write_model(tmp_path / "m.safetensors", {"a": a})
    wc = ccht.WeightCache(budget_bytes=64 * PAGE, page_bytes=PAGE)
    with wc.load(path) as m1, wc.load(path) as m2:
        v1 = np.from_dlpack(m1["a"])
        v2 = np.from_dlpack(m2["a"])
        assert v1.ctypes.data == v2.ctypes.data, "both views are the cache's one copy"
        r = np.from_dlpack(m2.raw("a"))
        assert r.ctypes.data == v1.ctypes.data and r.nbytes == v1.nbytes
        assert not (v1.flags.writeable or v2.flags.writeable or r.flags.writeable), \
            "published weights are shared: their views are read-only"
        del v1, v2, r


def test_views_keep_pins_and_nothing_is_reachable_after_release(tmp_path, rng):
    a = rng.standard_normal(20 * PAGE // 4).astype(np.float32)  # 20 pages
    b = rng.standard_normal(20 * PAGE // 4).astype(np.float32)
    pa = write_model(tmp_path / "a.safetensors", {"w": a})
    pb = write_model(tmp_path / "b.safetensors", {"w": b})
    wc = ccht.WeightCache(budget_bytes=30 * PAGE, page_bytes=PAGE)  # room for one of them
    with wc.load(pa) as ma:
        view = np.from_dlpack(ma["w"])
    assert ma.closed
    s = wc.stats()
    assert s["objects_pinned"] == 1 and s["pages_pinned"] == 20, "the live view keeps the pins"
    with pytest.raises(ccht.Error) as e:
        wc.load(pb)  # the budget is pinned by `view`: no space, and a's bytes stay
    assert e.value.code == "out_of_memory"
    assert np.array_equal(view, a)
    with pytest.raises(ValueError, match="closed"):
        ma["w"]
    del view
    gc.collect()
    assert wc.stats()["objects_pinned"] == 0
    with wc.load(pb) as mb:  # now a's pages can be evicted and reused for b
        assert np.array_equal(np.from_dlpack(mb["w"]), b)
    assert wc.stats()["pages_evicted"] >= 10


def test_object_lease_fill_publish_and_abandon():
    wc = ccht.WeightCache(budget_bytes=16 * PAGE, page_bytes=PAGE)
    size = 3 * PAGE + 100
    with wc.acquire([(11, size), (12, PAGE)]) as lease:
        assert list(lease.status) == [ccht.ObjectStatus.fill, ccht.ObjectStatus.fill]
        assert lease.fill_pages == [[0, 1, 2, 3], [0]]
        np.from_dlpack(lease.view(0))[:] = 5
        lease.publish()
    with wc.acquire([(11, size)]) as again:
        assert again.status[0] == ccht.ObjectStatus.hit
        v = np.from_dlpack(again.view(0))
        assert v.shape == (size,) and (v == 5).all()
        del v
    with wc.acquire([(13, PAGE)]) as never:
        assert never.status[0] == ccht.ObjectStatus.fill  # closed unpublished: abandoned
    assert wc.stats()["abandons"] == 1
    with wc.acquire([(13, PAGE)]) as retry:
        assert retry.status[0] == ccht.ObjectStatus.fill
    with pytest.raises(ccht.Error) as e:
        wc.acquire([(11, size + 1)])  # another size than the key has
    assert e.value.code == "invalid_argument"
    assert wc.erase([11, 12, 999]) == 2
    assert wc.wait_ready([11], timeout=0.1)


def test_hostile_files_raise_with_the_file_and_tensor(tmp_path):
    path = write_model(tmp_path / "ok.safetensors", {"x": np.ones(16, dtype=np.float32)})
    data = open(path, "rb").read()
    n = int.from_bytes(data[:8], "little")
    wc = ccht.WeightCache(budget_bytes=16 * PAGE, page_bytes=PAGE)
    cases = {
        "short": data[:5],
        "header_beyond": (10**6).to_bytes(8, "little") + data[8:],
        "bad_json": data[:8] + b"{" + b" " * (n - 1) + data[8 + n:],
        "truncated_data": data[:-4],
        "bad_dtype": data.replace(b'"F32"', b'"F33"'),
    }
    for what, blob in cases.items():
        p = tmp_path / f"{what}.safetensors"
        p.write_bytes(blob)
        with pytest.raises(ccht.Error) as e:
            wc.load(str(p))
        assert str(p) in str(e.value), (what, str(e.value))
        if what in ("bad_dtype", "truncated_data"):
            assert "'x'" in str(e.value) or '"x"' in str(e.value) or " x" in str(e.value), str(e.value)
    assert wc.stats()["objects"] == 0, "nothing cached from a bad file"
    with pytest.raises(ccht.Error):
        wc.load(str(tmp_path / "missing.safetensors"))
    with pytest.raises(ValueError, match="layout"):
        wc.load(path, layout="zigzag")
    with pytest.raises(ccht.Error) as e:
        ccht.WeightCache(budget_bytes=3 * PAGE + 1, page_bytes=PAGE)
    assert e.value.code == "invalid_size"


def test_many_threads_load_one_model_once(tmp_path, rng):
    tensors = {f"layer.{i}": rng.standard_normal(3 * PAGE // 4 + i).astype(np.float32)
               for i in range(12)}
    path = write_model(tmp_path / "m.safetensors", tensors)
    wc = ccht.WeightCache(budget_bytes=128 * PAGE, page_bytes=PAGE)
    errors, reports = [], []
    start = threading.Barrier(8)

    def worker():
        try:
            start.wait()
            for _ in range(5):
                with wc.load(path) as m:
                    for name, want in tensors.items():
                        if not np.array_equal(np.from_dlpack(m[name]), want):
                            errors.append(name)
                    reports.append(m.report)
        except Exception as e:  # noqa: BLE001 - surfaced below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert len(reports) == 40
    s = wc.stats()
    assert s["fills"] == len(tensors), "each tensor filled once, whatever the threads"
    assert sum(r["bytes_read"] for r in reports) == sum(t.nbytes for t in tensors.values())
    assert s["objects_pinned"] == 0


def test_digest_matches_zlib(tmp_path, rng):
    tensors = {"a": rng.standard_normal((64, 64)).astype(np.float32),
               "b": np.arange(77, dtype=np.int64)}
    path = write_model(tmp_path / "m.safetensors", tensors)
    wc = ccht.WeightCache(budget_bytes=64 * PAGE, page_bytes=PAGE)
    with wc.load(path) as m:
        for name, want in tensors.items():
            assert zlib.crc32(np.from_dlpack(m.raw(name)).tobytes()) == zlib.crc32(want.tobytes())


def test_torch_sees_the_cache_memory(tmp_path, rng):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: torch.from_dlpack untested")
    a = rng.standard_normal((8, 8)).astype(np.float32)
    path = write_model(tmp_path / "m.safetensors", {"a": a})
    wc = ccht.WeightCache(budget_bytes=16 * PAGE, page_bytes=PAGE)
    with wc.load(path) as m:
        t = torch.from_dlpack(m["a"])
        assert torch.equal(t, torch.from_numpy(a))
        assert t.data_ptr() == np.from_dlpack(m["a"]).ctypes.data, "no copy"
        del t
    assert os.path.exists(path)
