"""Hostile and careless use from Python (issue 31): every bad input is a clear error that names
the argument and changes nothing, shared memory cannot be written by a reader, a lease's pins
are its own, and no call crashes the interpreter (not even at exit)."""

import math
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import ccht
from conftest import write_model

U64 = np.uint64
PAGE = 4096
S = ccht.PageStatus
O = ccht.ObjectStatus


# ---- case 2: views of published data are read-only ---------------------------------------------

def test_model_views_are_read_only_and_the_next_load_sees_the_file(tmp_path):
    a = np.arange(1000, dtype=np.float32)
    path = write_model(tmp_path / "m.safetensors", {"a": a})
    wc = ccht.WeightCache(budget_bytes=16 * PAGE, page_bytes=PAGE)
    with wc.load(path) as m:
        for view in (m["a"], m.raw("a")):
            with pytest.raises(ValueError, match="read-only"):
                np.from_dlpack(view)[:] = 0
            assert memoryview(view).readonly
    with wc.load(path) as again:
        assert again.report["warm"]
        assert np.array_equal(np.from_dlpack(again["a"]), a), "the cached weights are the file's"


def test_object_views_are_writable_only_while_an_unpublished_fill():
    wc = ccht.WeightCache(budget_bytes=16 * PAGE, page_bytes=PAGE)
    with wc.acquire([(1, PAGE)]) as filler:
        assert filler.status[0] == O.fill
        before = np.from_dlpack(filler.view(0))
        before[:] = 7  # the caller writes its fill through the view
        # publish() maps the pages read-only: a live writable view would fault on its next write
        with pytest.raises(ValueError, match="writable view"):
            filler.publish()
        del before
        filler.publish()
        with pytest.raises(ValueError, match="read-only"):
            np.from_dlpack(filler.view(0))[:] = 0  # published: shared with every reader
    with wc.acquire([(1, PAGE)]) as reader:
        assert reader.status[0] == O.hit
        hit = np.from_dlpack(reader.view(0))
        assert not hit.flags.writeable and (hit == 7).all()
        del hit


def test_page_views_are_writable_only_while_an_unpublished_fill():
    pc = ccht.PageCache(num_pages=8, page_bytes=PAGE)
    with pc.acquire(np.array([5], dtype=U64)) as filler:
        np.from_dlpack(filler.view(0))[:] = 3
        filler.publish()
        assert not np.from_dlpack(filler.view(0)).flags.writeable
    with pc.lookup(np.array([5], dtype=U64)) as reader:
        assert reader.status[0] == S.hit
        with pytest.raises(ValueError, match="read-only"):
            np.from_dlpack(reader.view(0))[:] = 0
    assert np.from_dlpack(pc.pool()).flags.writeable, "the pool is for kernels that write fills"


# ---- case 3: find_into never converts its outputs ----------------------------------------------

@pytest.mark.parametrize("values, found", [
    (np.zeros(3, np.int64), np.zeros(3, bool)),
    (np.zeros(3, np.float64), np.zeros(3, bool)),
    (np.zeros(6, U64)[::2], np.zeros(3, bool)),
    (np.zeros(3, U64), np.zeros(3, np.uint8)),
    (np.zeros(3, U64), np.zeros(3, np.int32)),
], ids=["int64", "float64", "strided", "found-uint8", "found-int32"])
def test_find_into_rejects_outputs_it_would_convert(values, found):
    t = ccht.Table(slots=1024)
    keys = np.array([1, 2, 3], dtype=U64)
    t.insert(keys, keys * U64(10))
    with pytest.raises(TypeError, match=r"values: numpy.typing.NDArray\[numpy.uint64\]"):
        t.find_into(keys, values, found)
    assert not values.any() and not found.any(), "nothing written anywhere"
    out_v, out_f = np.zeros(3, U64), np.zeros(3, bool)
    t.find_into(keys, out_v, out_f)
    assert out_f.all() and (out_v == keys * U64(10)).all()


def test_find_into_rejects_a_read_only_output():
    t = ccht.Table(slots=1024)
    values = np.zeros(2, U64)
    values.flags.writeable = False
    with pytest.raises(TypeError):
        t.find_into(np.array([1, 2], dtype=U64), values, np.zeros(2, bool))


# ---- case 4: a lease's batch calls check everything first --------------------------------------

@pytest.mark.parametrize("which, message", [
    ([0, 0], "element 0 is given twice"),
    ([1, 2], "element 2 is out of range"),
    ([-1], "element -1 is out of range"),
    ([0, 1, 0], "element 0 is given twice"),
])
def test_page_lease_publish_checks_every_element_first(which, message):
    pc = ccht.PageCache(num_pages=8, page_bytes=PAGE)
    lease = pc.acquire(np.array([1, 2], dtype=U64))
    with pytest.raises(ValueError, match=message):
        lease.publish(which)
    assert pc.stats()["publishes"] == 0, "nothing published"
    lease.close()
    s = pc.stats()
    assert s["pages_pinned"] == 0 and s["pages_filling"] == 0 and s["abandons"] == 2


def test_page_lease_publish_rejects_a_published_element_and_keeps_the_rest():
    pc = ccht.PageCache(num_pages=8, page_bytes=PAGE)
    with pc.acquire(np.array([1, 2], dtype=U64)) as lease:
        lease.publish([0])
        with pytest.raises(ValueError, match="element 0 is not an unpublished fill"):
            lease.publish([1, 0])
    s = pc.stats()
    assert s["publishes"] == 1 and s["abandons"] == 1 and s["pages_pinned"] == 0


# ---- case 5: publish racing close --------------------------------------------------------------

def test_a_closed_lease_never_publishes_another_callers_fill():
    pc = ccht.PageCache(num_pages=8, page_bytes=PAGE)
    key = np.array([9], dtype=U64)
    a = pc.acquire(key)
    a.close()  # abandons the fill
    b = pc.acquire(key)
    assert b.status[0] == S.fill, "b fills the key now"
    with pytest.raises(ValueError, match="PageLease.publish: the lease is closed"):
        a.publish()
    with pc.lookup(key) as look:
        assert look.status[0] == S.pending, "b's unwritten page is not ready"
    b.close()
    wc = ccht.WeightCache(budget_bytes=8 * PAGE, page_bytes=PAGE)
    lease = wc.acquire([(1, PAGE)])
    lease.close()
    with pytest.raises(ValueError, match="ObjectLease.publish: the lease is closed"):
        lease.publish()


def test_publish_racing_close_never_reaches_the_cache_after_close():
    # The publisher converts a long `which` holding the GIL while the closer waits for it; a
    # short switch interval then hands the GIL to the closer just as the publisher lets it go,
    # inside publish: the closer's release and the publish race for the lease.
    n = 200_000
    pc = ccht.PageCache(num_pages=2 * n + 64, page_bytes=64)
    errors, outcomes = [], []
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for r in range(5):
            keys = np.arange(1 + r * n, 1 + (r + 1) * n, dtype=U64)
            lease = pc.acquire(keys)
            assert (lease.status == S.fill).all()
            which = list(range(n))
            start = threading.Barrier(2)

            def publisher():
                start.wait()
                try:
                    lease.publish(which)
                    outcomes.append("published")
                except ValueError as e:
                    (outcomes if "the lease is closed" in str(e) else errors).append(str(e))
                except Exception as e:  # noqa: BLE001 - any other error is the bug
                    errors.append(repr(e)[:200])

            th = threading.Thread(target=publisher)
            th.start()
            start.wait()
            time.sleep(0.0005)
            lease.close()
            third = pc.acquire(keys[:1])  # a third caller, once the lease is closed
            th.join()
            if third.status[0] == S.fill:
                with pc.lookup(keys[:1]) as look:
                    assert look.status[0] == S.pending, "the closed lease published a fill"
            third.close()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[:3]
    s = pc.stats()
    assert s["pages_pinned"] == 0 and s["pages_filling"] == 0


def test_threads_racing_publish_and_close_leave_no_pin():
    pc = ccht.PageCache(num_pages=256, page_bytes=64)
    errors = []
    for r in range(200):
        lease = pc.acquire(np.array([2 * r + 1, 2 * r + 2], dtype=U64))
        start = threading.Barrier(3)

        def publisher(which):
            start.wait()
            try:
                lease.publish(which)
            except ValueError as e:
                if "the lease is closed" not in str(e):
                    errors.append(str(e))
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))

        ts = [threading.Thread(target=publisher, args=([i],)) for i in (0, 1)]
        for t in ts:
            t.start()
        start.wait()
        lease.close()
        for t in ts:
            t.join()
    assert not errors, errors[:3]
    s = pc.stats()
    assert s["pages_pinned"] == 0 and s["pages_filling"] == 0


# ---- case 6: object sizes ----------------------------------------------------------------------

def test_object_sizes_out_of_range():
    wc = ccht.WeightCache(budget_bytes=16 * PAGE, page_bytes=PAGE)
    with pytest.raises((ccht.Error, ValueError)) as e:
        wc.acquire([(7, 2**64 - 1)])
    if isinstance(e.value, ccht.Error):
        assert e.value.code == "invalid_size"
    assert "7" in str(e.value) and "budget" in str(e.value)
    for size in (-1, 2**64):
        with pytest.raises(ValueError, match=r"requests\[0\]: bytes .* is out of range"):
            wc.acquire([(7, size)])
    with pytest.raises(ValueError, match=r"requests\[1\]: key .* is out of range"):
        wc.acquire([(7, PAGE), (-7, PAGE)])
    with pytest.raises(TypeError, match="bytes"):
        wc.acquire([(7, 4096.0)])
    with pytest.raises(TypeError, match="pair"):
        wc.acquire([(7, PAGE, 1)])
    s = wc.stats()
    assert s["objects"] == 0 and s["objects_pinned"] == 0, "nothing acquired"


# ---- case 7: bulk calls in daemon threads at interpreter exit -----------------------------------

DAEMON = textwrap.dedent("""
    import sys, threading, numpy as np, ccht
    which, path = sys.argv[1], sys.argv[2]
    if which == "find":
        t = ccht.Table(slots=1 << 19)
        keys = np.arange(1, 1 << 18, dtype=np.uint64)
        t.insert(keys, keys)
        call = lambda: t.find(keys)
    elif which == "acquire":
        pc = ccht.PageCache(num_pages=1 << 14, page_bytes=64)
        keys = np.arange(1, 1 << 14, dtype=np.uint64)
        call = lambda: pc.acquire(keys).close()
    else:
        from safetensors.numpy import save_file
        save_file({f"w{i}": np.ones(1 << 14, dtype=np.float32) for i in range(32)}, path)
        wc = ccht.WeightCache(budget_bytes=16 << 20, page_bytes=4096)
        call = lambda: wc.load(path).close()
    running = threading.Event()
    def loop():
        while True:
            call()
            running.set()
    threading.Thread(target=loop, daemon=True).start()
    running.wait(60)
    # exit now: the daemon thread is in (or about to enter) a bulk call without the GIL
""")


@pytest.mark.parametrize("call", ["find", "acquire", "load"])
def test_a_daemon_thread_in_a_bulk_call_does_not_abort_the_exit(tmp_path, call):
    script = tmp_path / "daemon.py"
    script.write_text(DAEMON)
    runs = [subprocess.Popen([sys.executable, str(script), call, str(tmp_path / f"m{i}.st")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for i in range(5)]
    for p in runs:
        _, err = p.communicate(timeout=120)
        assert "terminate called" not in err and "Fatal Python error" not in err, err[-2000:]
        assert p.returncode == 0, (p.returncode, err[-2000:])


# ---- case 12: wait_ready timeouts --------------------------------------------------------------

@pytest.mark.parametrize("timeout", [math.inf, 1e16])
def test_wait_ready_without_a_limit_waits_for_the_publish(timeout):
    wc = ccht.WeightCache(budget_bytes=8 * PAGE, page_bytes=PAGE)
    lease = wc.acquire([(3, PAGE)])
    assert lease.status[0] == O.fill
    publish = threading.Timer(0.2, lease.publish)
    publish.start()
    try:
        assert wc.wait_ready([3], timeout), "returned before the fill was published"
        assert wc.stats()["objects_filling"] == 0
    finally:
        publish.join()
        lease.close()


@pytest.mark.parametrize("timeout", [-1.0, math.nan, -math.inf])
def test_wait_ready_rejects_a_negative_or_nan_timeout(timeout):
    wc = ccht.WeightCache(budget_bytes=8 * PAGE, page_bytes=PAGE)
    with pytest.raises(ValueError, match="wait_ready: timeout"):
        wc.wait_ready([3], timeout)


# ---- case 13: keys and tokens are never converted with a loss ----------------------------------

def key_calls():
    t = ccht.Table(slots=1024)
    pc = ccht.PageCache(num_pages=8, page_bytes=PAGE)
    wc = ccht.WeightCache(budget_bytes=8 * PAGE, page_bytes=PAGE)
    return {
        "Table.insert": lambda k: t.insert(k, np.arange(1, 3, dtype=U64)),
        "Table.find": t.find,
        "Table.contains": t.contains,
        "Table.erase": t.erase,
        "Table.find_into": lambda k: t.find_into(k, np.zeros(2, U64), np.zeros(2, bool)),
        "PageCache.acquire": pc.acquire,
        "PageCache.lookup": pc.lookup,
        "PageCache.erase": pc.erase,
        "WeightCache.erase": wc.erase,
        "WeightCache.wait_ready": lambda k: wc.wait_ready(k, 0),
    }, (t, pc, wc)


@pytest.mark.parametrize("name", list(key_calls()[0]))
def test_keys_are_never_converted_with_a_loss(name):
    calls, (t, pc, wc) = key_calls()
    call = calls[name]
    for keys in (np.array([1.5, 1.7]), np.array([1.0, 2.0], dtype=np.float32), [1.5, 2],
                 np.array([True, False])):
        with pytest.raises(TypeError, match=name + ": keys: expected"):
            call(keys)
    for keys in (np.array([-1, 2]), [1, -2], [2**64, 1]):
        with pytest.raises(ValueError, match=name + ": keys: element . .*out of range"):
            call(keys)
    assert len(t) == 0 and pc.stats()["pages_resident"] == 0 and wc.stats()["objects"] == 0
    call(np.array([1, 2], dtype=np.int64))  # in range: taken as they are
    call([1, 2])


def test_integer_keys_in_range_mean_the_same_keys():
    t = ccht.Table(slots=1024)
    t.insert(np.array([1, 2], dtype=np.int32), [10, 2**64 - 3])
    values, found = t.find(np.array([2, 1, 3], dtype=np.int16))
    assert found.tolist() == [True, True, False] and values[:2].tolist() == [2**64 - 3, 10]
    values, found = t.find(np.array([9, 1, 9, 2], dtype=U64)[1::2])  # strided: copied, not cut
    assert found.all() and values.tolist() == [10, 2**64 - 3]


def test_chain_keys_rejects_tokens_out_of_uint32_range():
    with pytest.raises(ValueError, match=r"chain_keys: tokens: element 1 .*out of range"):
        ccht.chain_keys(np.array([1, 2 + 2**32]), 1)
    with pytest.raises(ValueError, match="chain_keys: tokens: element 0"):
        ccht.chain_keys(np.array([-1, 2]), 1)
    with pytest.raises(TypeError, match="chain_keys: tokens: expected"):
        ccht.chain_keys(np.array([1.0, 2.0]), 1)
    same = ccht.chain_keys(np.array([1, 2], dtype=np.uint32), 1)
    assert (ccht.chain_keys([1, 2], 1) == same).all()
    assert (ccht.chain_keys(np.array([1, 2], dtype=np.int64), 1) == same).all()


# ---- case 14: names and paths ------------------------------------------------------------------

def bad_name_file(path, name):
    """A safetensors file of one tensor whose name is the raw JSON string bytes `name`."""
    header = b'{"' + name + b'":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}'
    header += b" " * (-len(header) % 8)
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(16))
    return str(path)


@pytest.mark.parametrize("name, shown", [(b"a\xffb", r"a\\xff"), (b"a\\udcffb", "udcff")],
                         ids=["raw-byte", "unpaired-surrogate"])
def test_a_tensor_name_that_is_not_utf8_names_the_file_and_the_tensor(tmp_path, name, shown):
    path = bad_name_file(tmp_path / "bad.safetensors", name)
    wc = ccht.WeightCache(budget_bytes=16 * PAGE, page_bytes=PAGE)
    with pytest.raises(ccht.Error, match=shown) as e:
        wc.load(path)
    assert path in str(e.value) and e.value.code == "invalid_argument"
    assert wc.stats()["objects"] == 0


def test_a_path_with_a_nul_is_refused(tmp_path):
    good = write_model(tmp_path / "good.safetensors", {"x": np.ones(4, dtype=np.float32)})
    wc = ccht.WeightCache(budget_bytes=16 * PAGE, page_bytes=PAGE)
    for path in (good + "\x00junk", (good + "\x00junk").encode()):
        with pytest.raises(ValueError, match="WeightCache.load: path .* contains a NUL"):
            wc.load(path)
    assert wc.stats()["objects"] == 0
    with wc.load(tmp_path / "good.safetensors") as m:  # os.PathLike works too
        assert list(m) == ["x"] and m.path == good


def test_loading_a_directory_says_it_is_not_a_regular_file(tmp_path):
    wc = ccht.WeightCache(budget_bytes=16 * PAGE, page_bytes=PAGE)
    with pytest.raises(ccht.Error, match="not a regular file"):
        wc.load(str(tmp_path))


# ---- cases 8, 9 and 1: the machine's memory, FIFOs, and many distinct models ---------------------

def test_a_fifo_given_as_a_model_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    wc = ccht.WeightCache(budget_bytes=16 * PAGE, page_bytes=PAGE)
    outcome = []

    def load():
        try:
            wc.load(str(fifo))
        except ccht.Error as e:
            outcome.append(str(e))

    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(20)
    if t.is_alive():  # blocked in open(): release it, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("WeightCache.load blocked on a FIFO")
    assert outcome and "not a regular file (a FIFO)" in outcome[0], outcome


def _mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def test_a_budget_beyond_the_machines_memory_is_refused():
    avail = _mem_available()
    if avail is None:
        pytest.skip("no MemAvailable in /proc/meminfo")
    budget = (avail * 3 // 2) // PAGE * PAGE
    with pytest.raises(ccht.Error, match="available"):
        ccht.WeightCache(budget_bytes=budget, page_bytes=PAGE, huge_pages="off")


def test_many_distinct_models_keep_objects_bounded(tmp_path):
    wc = ccht.WeightCache(budget_bytes=64 * PAGE, page_bytes=PAGE)
    for i in range(300):
        path = write_model(tmp_path / f"m{i}.safetensors",
                           {f"t{j}": np.full(100, (i + j) % 256, dtype=np.uint8) for j in range(10)})
        with wc.load(path) as m:
            assert np.from_dlpack(m["t3"])[0] == (i + 3) % 256
        os.remove(path)
    s = wc.stats()
    assert s["objects"] <= s["bytes_resident"] // PAGE, s
    assert s["pages_pinned"] == 0
