"""ccht.PageCache from Python: fills, hits, zero-copy views, and the pin rule (a lease keeps its
pins until it is closed and its last view is gone)."""

import gc

import numpy as np
import pytest

import ccht

U64 = np.uint64
S = ccht.PageStatus


def fill(pc, keys, byte_of):
    """Acquires keys, writes page i with byte_of(key) through a view, publishes, closes."""
    with pc.acquire(np.asarray(keys, dtype=U64)) as lease:
        for i, k in enumerate(lease.keys.tolist()):
            if lease.status[i] == S.fill:
                np.from_dlpack(lease.view(i))[:] = byte_of(k)
        lease.publish()
        return lease.status.copy()


def test_fill_publish_then_hit_sees_the_bytes():
    pc = ccht.PageCache(num_pages=64, page_bytes=4096)
    keys = np.arange(100, 110, dtype=U64)
    assert (fill(pc, keys, lambda k: k % 251) == S.fill).all()
    with pc.lookup(keys) as lease:
        assert (lease.status == S.hit).all()
        for i, k in enumerate(keys.tolist()):
            page = np.from_dlpack(lease.view(i))
            assert page.shape == (4096,) and page.dtype == np.uint8
            assert (page == k % 251).all()
        assert pc.stats()["pages_pinned"] == 10
    assert pc.stats()["pages_pinned"] == 10, "the last view (`page`) still holds the lease's pins"
    del page
    s = pc.stats()
    assert s["pages_pinned"] == 0 and s["pages_resident"] == 10 and s["publishes"] == 10


def test_zero_copy_both_ways():
    pc = ccht.PageCache(num_pages=16, page_bytes=4096)
    with pc.acquire(np.array([7], dtype=U64)) as lease:
        view = np.from_dlpack(lease.view(0))  # a fill: written in place
        pool = np.from_dlpack(pc.pool())
        assert pool.shape == (16, 4096)
        page = int(lease.pages[0])
        view[:8] = 42  # through the view: seen in the cache's pool
        assert (pool[page, :8] == 42).all()
        pool[page, 8:16] = 9  # through the cache's memory: seen by the view
        assert (view[8:16] == 9).all()
        lease.publish()
        again = np.from_dlpack(lease.view(0))
        assert again.ctypes.data == view.ctypes.data, "a view is the page itself, not a copy"
        del view, again, pool


def test_live_view_keeps_the_pin_after_close():
    pc = ccht.PageCache(num_pages=16, page_bytes=4096)
    fill(pc, [1, 2], lambda k: k)
    lease = pc.lookup(np.array([1, 2], dtype=U64))
    view = np.from_dlpack(lease.view(0))
    lease.close()
    assert lease.closed
    assert pc.stats()["pages_pinned"] == 2, "a live view keeps every pin of its lease"
    assert pc.erase(np.array([1], dtype=U64)) == 0, "a pinned page cannot be erased"
    with pytest.raises(ValueError, match="closed"):
        lease.view(1)
    assert (view == 1).all()
    del view
    gc.collect()
    assert pc.stats()["pages_pinned"] == 0
    assert pc.erase(np.array([1], dtype=U64)) == 1


def test_a_viewed_page_is_never_evicted_or_reused():
    pc = ccht.PageCache(num_pages=32, page_bytes=4096)
    fill(pc, [5], lambda k: 77)
    lease = pc.lookup(np.array([5], dtype=U64))
    view = np.from_dlpack(lease.view(0))
    page = int(lease.pages[0])
    lease.close()
    for start in range(1000, 3000, 16):  # churn far past the pool's size
        fill(pc, np.arange(start, start + 16), lambda k: 0)
    assert (view == 77).all(), "a page under a live view kept its bytes"
    with pc.lookup(np.array([5], dtype=U64)) as again:
        assert again.status[0] == S.hit and int(again.pages[0]) == page
    del view


def test_closing_an_unpublished_fill_abandons_it():
    pc = ccht.PageCache(num_pages=8, page_bytes=4096)
    with pc.acquire(np.array([3, 4], dtype=U64)) as lease:
        assert (lease.status == S.fill).all()
        lease.publish(which=[1])
        with pytest.raises(ValueError, match="not an unpublished fill"):
            lease.publish(which=[1])
    with pc.lookup(np.array([3, 4], dtype=U64)) as lease:
        assert lease.status.tolist() == [S.miss, S.hit]
    s = pc.stats()
    assert s["abandons"] == 1 and s["pages_filling"] == 0 and s["pages_pinned"] == 0


def test_pending_and_no_space():
    pc = ccht.PageCache(num_pages=4, page_bytes=4096)
    a = pc.acquire(np.array([1], dtype=U64))
    b = pc.acquire(np.array([1], dtype=U64))
    assert a.status[0] == S.fill and b.status[0] == S.pending
    with pytest.raises(ValueError, match="holds no page"):
        b.view(0)
    a.publish()
    big = pc.acquire(np.arange(10, 13, dtype=U64))  # the other 3 pages, pinned
    big.publish()  # (closing unpublished fills would free their pages)
    full = pc.acquire(np.array([99], dtype=U64))
    assert full.status[0] == S.no_space
    for x in (a, b, big, full):
        x.close()
    with pc.acquire(np.array([99], dtype=U64)) as ok:
        assert ok.status[0] == S.fill and len(ok.evicted_keys) == 1


def test_match_prefix_with_chain_keys():
    pc = ccht.PageCache(num_pages=64, page_bytes=4096)
    tokens = np.arange(64, dtype=np.uint32)
    keys = ccht.chain_keys(tokens, 16)
    assert keys.dtype == U64 and len(keys) == 4
    other = ccht.chain_keys(np.concatenate([tokens[:32], tokens[32:][::-1]]), 16)
    assert (other[:2] == keys[:2]).all() and (other[2:] != keys[2:]).all()
    fill(pc, keys[:3], lambda k: 1)
    with pc.match_prefix(keys) as run:
        assert len(run) == 3 and (run.keys == keys[:3]).all()
        assert (run.status == S.hit).all()
    with pc.match_prefix(other) as run:
        assert len(run) == 2


def test_page_cache_errors():
    with pytest.raises(ccht.Error) as e:
        ccht.PageCache(num_pages=0, page_bytes=4096)
    assert e.value.code == "invalid_size"
    pc = ccht.PageCache(num_pages=4, page_bytes=4096)
    with pytest.raises(ccht.Error) as e:
        pc.acquire(np.array([2**64 - 1], dtype=U64))
    assert e.value.code == "reserved_key"
    assert pc.stats()["pages_resident"] == 0
