"""Size cap: LRU eviction from several processes ends under the cap and keeps the most recently used."""
from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback

from cache_fakes import fake_cubin, make_spec
from cuopjit.cache import KernelCache, entry as entry_format

CTX = mp.get_context("fork")
SIZE = 64 << 10
ENTRY = len(entry_format.encode(make_spec(0), fake_cubin(make_spec(0), SIZE), created=time.time()))


def _store(root, cap, indices, barrier, errors):
    try:
        cache = KernelCache(root, max_size=cap)
        barrier.wait()
        for i in indices:
            spec = make_spec(i)
            cache.get_or_build(spec, lambda: fake_cubin(spec, SIZE))
    except BaseException:
        errors.put(traceback.format_exc())


def _names(root) -> set[str]:
    return {p.name for p in (root / "kernels").glob("*.cubin")}


def test_eviction_from_several_processes_keeps_the_recently_used_under_the_cap(cache_dir):
    cap = 21 * ENTRY + ENTRY // 2
    cache = KernelCache(cache_dir, max_size=cap)
    for i in range(10):
        cache.get_or_build(make_spec(i), lambda i=i: fake_cubin(make_spec(i), SIZE))
    time.sleep(0.02)
    reader = KernelCache(cache_dir, max_size=cap)
    for i in range(5):
        assert reader.get_or_build(make_spec(i), lambda: b"")[1] is True
    time.sleep(0.02)
    barrier, errors = CTX.Barrier(4), CTX.Queue()
    procs = [CTX.Process(target=_store, args=(cache_dir, cap, range(100 + 4 * p, 104 + 4 * p), barrier, errors))
             for p in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert errors.empty()
    stats = KernelCache(cache_dir).stats()
    assert stats.bytes <= cap
    assert _names(cache_dir) == {make_spec(i).file_name for i in [*range(5), *range(100, 116)]}
    assert stats.evictions == 5


def test_prune_evicts_oldest_first_and_clears_rejected(cache_dir):
    cache = KernelCache(cache_dir, max_size=1 << 30)
    for i in range(6):
        cache.get_or_build(make_spec(i), lambda i=i: fake_cubin(make_spec(i), SIZE))
        os.utime(cache.layer.entry_path(make_spec(i)), ns=(i * 10**9, i * 10**9))
    cache.layer.entry_path(make_spec(5)).write_bytes(b"bad")
    assert cache.verify(fix=True).moved == 1
    newest = sum(cache.layer.entry_path(make_spec(i)).stat().st_size for i in (3, 4))
    result = cache.prune(newest)
    assert (result.evicted, result.remaining) == (3, newest)
    assert _names(cache_dir) == {make_spec(3).file_name, make_spec(4).file_name}
    assert list((cache_dir / "rejected").iterdir()) == []
    assert cache.stats().evictions == 3


def test_eviction_does_not_disturb_a_reader_that_has_the_file_open(cache_dir):
    spec = make_spec(1)
    cache = KernelCache(cache_dir)
    cache.get_or_build(spec, lambda: fake_cubin(spec, SIZE))
    with open(cache.layer.entry_path(spec), "rb") as f:
        KernelCache(cache_dir).prune(0)
        assert not cache.layer.entry_path(spec).exists()
        assert entry_format.decode(f.read()).payload == fake_cubin(spec, SIZE)


def test_store_over_the_cap_prunes_automatically(cache_dir):
    cache = KernelCache(cache_dir, max_size=3 * ENTRY)
    for i in range(8):
        cache.get_or_build(make_spec(i), lambda i=i: fake_cubin(make_spec(i), SIZE))
    assert KernelCache(cache_dir).stats().bytes <= 3 * ENTRY
    assert make_spec(7).file_name in _names(cache_dir)
