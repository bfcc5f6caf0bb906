"""ccht: a GPU-memory cache for deep-learning function runtimes.

The index is a bucketized cuckoo hash table whose per-bucket LRU queues replace cuckoo kick-out
(double LRU). On top of it, a page cache of pinned pages (KV-cache blocks) and a weight cache that
holds safetensors tensors contiguously. Pages and tensors are exported through DLPack without a
copy: ``numpy.from_dlpack`` and ``torch.from_dlpack`` see the cache's own memory.

Pin rule: a lease (``PageCache.acquire``, ``WeightCache.acquire``) or a ``Model``
(``WeightCache.load``) keeps its pins until it is closed (``close()`` or the end of its ``with``
block) *and* the last view exported from it is gone. So a view never outlives its pin, and a
page cannot be evicted or reused under a live view. See docs/python.md.

Example::

    import ccht, numpy as np
    t = ccht.Table(slots=1 << 20, policy="double-lru", capacity=900_000, backend="cpu")
    ev_keys, ev_vals = t.insert(keys, values)
    vals, found = t.find(keys)
    wc = ccht.WeightCache(budget_bytes=256 << 20, backend="cpu")
    with wc.load("model.safetensors") as model:
        w = np.from_dlpack(model["embeddings.word_embeddings.weight"])
"""

from ._ccht import (
    Error,
    Model,
    ObjectLease,
    ObjectStatus,
    PageCache,
    PageLease,
    PageStatus,
    Table,
    WeightCache,
    chain_keys,
    chain_root,
    cuda_available,
    has_cuda,
    parse_bytes,
)

__version__ = "0.1.0"

__all__ = [
    "Error",
    "Model",
    "ObjectLease",
    "ObjectStatus",
    "PageCache",
    "PageLease",
    "PageStatus",
    "Table",
    "WeightCache",
    "chain_keys",
    "chain_root",
    "cuda_available",
    "has_cuda",
    "parse_bytes",
    "__version__",
]
