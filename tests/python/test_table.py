"""ccht.Table against a dict: every key inserted is found with its latest value, or was reported
evicted exactly once with the value it had; on random and adversarial batches, every policy."""

import numpy as np
import pytest

import ccht

POLICIES = ["lru", "fifo", "lfu", "double-lru", "coarse-lru", "cht-lru", "cht-random"]
U64 = np.uint64


def check_against_model(t, model):
    keys = np.fromiter(model.keys(), dtype=U64, count=len(model))
    vals, found = t.find(keys) if len(keys) else (np.zeros(0, U64), np.zeros(0, bool))
    assert found.all(), f"{(~found).sum()} resident keys not found"
    expect = np.fromiter(model.values(), dtype=U64, count=len(model))
    assert (vals == expect).all()
    assert len(t) == len(model)
    ik, iv = t.items()
    assert dict(zip(ik.tolist(), iv.tolist())) == model


def apply_insert(t, model, keys, values):
    """One insert batch against the dict `model`. Values must be unique per (key, batch), so an
    evicted pair names the version it evicted: the one before the batch (evicted before the
    batch upserted the key) or the batch's own (evicted after). Each version at most once."""
    ek, ev = t.insert(keys, values)
    assert ek.dtype == U64 and ev.dtype == U64 and len(ek) == len(ev)
    new = dict(zip(keys.tolist(), values.tolist()))
    assert len(new) == len(keys), "the test gives each key once per batch"
    evicted = set()
    for k, v in zip(ek.tolist(), ev.tolist()):
        assert (k, v) not in evicted, f"({k}, {v}) reported evicted twice"
        assert v in (model.get(k), new.get(k)), f"evicted ({k}, {v}) was never this key's value"
        evicted.add((k, v))
    for k, v in new.items():
        model[k] = v
    for k, v in evicted:
        if model.get(k) == v:
            del model[k]
    return len(ek)


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_name_is_taken(policy):
    global_layer = policy in ("double-lru", "coarse-lru", "cht-lru", "cht-random")
    t = ccht.Table(slots=64, policy=policy, capacity=48 if global_layer else 0)
    assert t.policy == policy
    t.insert(np.arange(1, 4, dtype=U64), np.arange(10, 13, dtype=U64))
    assert t.find(np.arange(1, 4, dtype=U64))[1].all()


@pytest.mark.parametrize("typo", ["double_lru", "LRU", "ccht-lru", "", "arc"])
def test_unknown_policy_lists_the_valid_ones(typo):
    """A typo is a ValueError whose message is the library's (include/ccht/policy_list.hpp):
    every valid name, in order, and the name given."""
    with pytest.raises(ValueError) as e:
        ccht.Table(slots=64, policy=typo)
    assert str(e.value) == f"policy must be one of {', '.join(POLICIES)}; got '{typo}'"


@pytest.mark.parametrize("policy", POLICIES)
def test_random_batches_match_a_dict(policy, rng):
    cap = 1500 if policy in ("double-lru", "coarse-lru") else 0
    t = ccht.Table(slots=2048, policy=policy, capacity=cap, cpu_threads=1)
    model = {}
    evicted = 0
    for _ in range(30):
        keys = rng.choice(4000, size=200, replace=False).astype(U64) + 1
        values = (rng.integers(0, 2**40, size=200) * 1024 + _).astype(U64)  # unique per batch
        evicted += apply_insert(t, model, keys, values)
        if cap:
            assert len(t) <= cap
    assert evicted > 0, "the workload must overflow the table"
    check_against_model(t, model)
    gone = np.fromiter(list(model)[:50], dtype=U64)
    assert t.erase(gone) == 50
    for k in gone.tolist():
        del model[k]
    check_against_model(t, model)
    assert not t.contains(gone).any()


def test_adversarial_duplicates_and_one_bucket(rng):
    # The same key many times in one batch (one thread: index order, the last value wins), and
    # a run of keys that all hash to few buckets because the table is tiny.
    t = ccht.Table(slots=32, policy="lru", cpu_threads=1)
    model = {}
    keys = np.array([5, 5, 5, 7, 5, 7], dtype=U64)
    values = np.array([1, 2, 3, 4, 5, 6], dtype=U64)
    ek, _ = t.insert(keys, values)
    assert len(ek) == 0
    model.update({5: 5, 7: 6})
    check_against_model(t, model)
    for b in range(20):
        keys = rng.choice(10_000, size=40, replace=False).astype(U64) + 10
        apply_insert(t, model, keys, keys * U64(100) + U64(b))
    check_against_model(t, model)
    assert len(t) <= t.num_slots


def test_find_promotes_and_find_into_reuses_buffers():
    t = ccht.Table(slots=1 << 12)
    keys = np.arange(1, 1001, dtype=U64)
    t.insert(keys, keys + U64(10))
    out_v = np.zeros(1000, U64)
    out_f = np.zeros(1000, bool)
    t.find_into(keys, out_v, out_f)
    assert out_f.all() and (out_v == keys + U64(10)).all()
    assert t.contains(np.array([1, 5000], dtype=U64)).tolist() == [True, False]


def test_inputs_any_dlpack_producer_and_conversion():
    class Producer:  # only the DLPack protocol, no buffer protocol
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    t = ccht.Table(slots=1 << 10)
    keys = np.arange(1, 101, dtype=U64)
    t.insert(Producer(keys), Producer(keys * U64(2)))
    vals, found = t.find(Producer(keys))
    assert found.all() and (vals == keys * U64(2)).all()
    # int64 and non-contiguous NumPy inputs are converted (copied), not rejected
    vals, found = t.find(np.arange(1, 101, dtype=np.int64)[::2])
    assert found.all()


def test_capacity_below_slots_holds():
    t = ccht.Table(slots=1 << 14, policy="double-lru", capacity=10_000)
    keys = np.arange(1, 30_001, dtype=U64)
    ek, ev = t.insert(keys, keys)
    assert len(t) <= 10_000
    assert len(ek) == 30_000 - len(t)
    assert (ek == ev).all()


@pytest.mark.parametrize("search,slack", [("two-level", 0), ("tail-index", 0), ("sampled", 0),
                                          ("own-first", 0), ("own-first", 64)])
def test_every_victim_search_holds_the_capacity_and_reports_its_victims(search, slack):
    t = ccht.Table(slots=1 << 12, policy="double-lru", capacity=3000, global_search=search,
                   own_first_slack=slack)
    keys = np.arange(1, 10_001, dtype=U64)
    ek, ev = t.insert(keys, keys * U64(3))
    assert len(t) <= 3000
    assert len(ek) == 10_000 - len(t), "every entry is held or reported evicted"
    assert (ev == ek * U64(3)).all()
    held = np.setdiff1d(keys, ek)
    assert t.find(held)[1].all()
    with pytest.raises(ValueError, match="two-level"):
        ccht.Table(slots=64, policy="double-lru", capacity=32, global_search="two_level")
    with pytest.raises(ccht.Error, match="own_first_slack 256"):
        ccht.Table(slots=64, policy="double-lru", capacity=32, global_search="own-first",
                   own_first_slack=256)


def test_errors_carry_the_cpp_message():
    t = ccht.Table(slots=64)
    bad = np.array([1, 2**64 - 1], dtype=U64)
    with pytest.raises(ccht.Error) as e:
        t.insert(bad, bad)
    assert e.value.code == "reserved_key"
    assert str(e.value).startswith("ccht: reserved_key: insert_or_assign: key at index 1")
    assert len(t) == 0, "a rejected batch changes nothing"
    with pytest.raises(ccht.Error) as e:
        t.insert(np.arange(1, 4, dtype=U64), np.arange(1, 3, dtype=U64))
    assert e.value.code == "invalid_size"
    with pytest.raises(ccht.Error) as e:
        ccht.Table(slots=0)
    assert e.value.code == "invalid_size"
    with pytest.raises(ccht.Error):
        ccht.Table(slots=64, policy="lru", capacity=10)  # no global layer
    with pytest.raises(ValueError, match="policy must be one of"):
        ccht.Table(slots=64, policy="arc")
    with pytest.raises(ValueError, match="backend"):
        ccht.Table(slots=64, backend="tpu")
    if not ccht.has_cuda:
        with pytest.raises(ValueError, match="no CUDA backend"):
            ccht.Table(slots=64, backend="cuda")
    with pytest.raises(TypeError):
        t.find(np.zeros((2, 2), dtype=U64))
    assert issubclass(ccht.Error, RuntimeError)


def test_access_stats_count():
    t = ccht.Table(slots=1 << 10, count_accesses=True)
    keys = np.arange(1, 101, dtype=U64)
    t.insert(keys, keys)
    s = t.access_stats()
    assert s["bucket_reads"] > 0 and s["bucket_writes"] >= 100
    t.reset_access_stats()
    assert t.access_stats()["bucket_reads"] == 0


@pytest.mark.parametrize("bulk", [True, False])
def test_a_large_batch_chooses_its_victims_in_one_pass(bulk):
    # 256 buckets at capacity; 1000 new keys need more than one victim per bucket.
    t = ccht.Table(slots=1 << 12, policy="double-lru", capacity=2000, cpu_threads=1,
                   count_accesses=True, bulk_victim_select=bulk)
    old = np.arange(1, 2001, dtype=U64)
    t.insert(old, old)
    t.reset_access_stats()
    new = np.arange(10_001, 11_001, dtype=U64)
    ek, ev = t.insert(new, new * U64(5))
    assert len(t) == 2000
    assert len(ek) == 1000 and (ek == ev).all()
    assert set(ek.tolist()) <= set(old.tolist())
    assert t.access_stats()["chosen_victims"] == (1000 if bulk else 0)
    if bulk:  # batch inserts of one tick each: the oldest are the first 1000 inserted
        assert sorted(ek.tolist()) == list(range(1, 1001))
