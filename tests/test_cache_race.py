"""Many processes, one cache directory: one compile per key, identical bytes, no torn entries, no deadlock."""
from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import random
import signal
import time
import traceback

import pytest

from cache_fakes import TINY_KERNEL, build_counts, counting_build, fake_cubin, make_spec, temp_files
from cuopjit.cache import EntrySpec, KernelCache, get_cache
from cuopjit.config import get_default_global_jit_config

CTX = mp.get_context("fork")
N_PROCS, N_KEYS, KEYS_EACH = 32, 16, 10


def _race_worker(root, keys, barrier, log, results):
    try:
        barrier.wait()
        cache = get_cache(root)
        out = {}
        for i in keys:
            spec = make_spec(i)
            cubin, _ = cache.get_or_build(spec, counting_build(spec, log, delay=0.02))
            out[i] = hashlib.sha256(cubin).hexdigest()
        results.put((os.getpid(), out, None))
    except BaseException:
        results.put((os.getpid(), None, traceback.format_exc()))


def _run_all(procs, results, timeout=60):
    for p in procs:
        p.start()
    got = [results.get(timeout=timeout) for _ in procs]
    for p in procs:
        p.join(timeout)
        assert p.exitcode == 0
    return got


def test_32_processes_compile_each_key_once_and_agree(cache_dir, tmp_path):
    log = tmp_path / "builds.log"
    barrier, results = CTX.Barrier(N_PROCS), CTX.Queue()
    rng = random.Random(7)
    plans = [rng.sample(range(N_KEYS), KEYS_EACH) for _ in range(N_PROCS)]
    procs = [CTX.Process(target=_race_worker, args=(cache_dir, plan, barrier, log, results)) for plan in plans]
    got = _run_all(procs, results)
    assert [err for _, _, err in got if err] == []
    expected = {i: hashlib.sha256(fake_cubin(make_spec(i))).hexdigest() for i in range(N_KEYS)}
    for _, out, _ in got:
        assert out == {i: expected[i] for i in out}
    wanted = {make_spec(i).key for plan in plans for i in plan}
    counts = build_counts(log)
    assert set(counts) == wanted and set(counts.values()) == {1}
    assert temp_files(cache_dir) == []
    stats = KernelCache(cache_dir).stats()
    assert stats.compiles == len(wanted) and stats.entries == len(wanted)
    assert stats.hits == N_PROCS * KEYS_EACH - len(wanted)
    assert stats.rejected == 0


def _real_spec() -> EntrySpec:
    from cuopjit.build.compiler import CompileOptions, nvrtc_version
    return EntrySpec("twice_sm80", TINY_KERNEL, CompileOptions(arch="sm_80").flags(), "sm_80", nvrtc_version(),
                     "tiny.cu.jinja", (("n", "1"),))


def _real_worker(root, barrier, log, results):
    from cuopjit.build.compiler import CompileOptions, compile_cubin
    try:
        spec = _real_spec()
        barrier.wait()

        def build() -> bytes:
            counting_build(spec, log)()
            return compile_cubin(spec.source, spec.name, CompileOptions(arch="sm_80")).cubin
        cubin, _ = get_cache(root).get_or_build(spec, build)
        results.put((os.getpid(), cubin, None))
    except BaseException:
        results.put((os.getpid(), None, traceback.format_exc()))


def test_real_nvrtc_race_compiles_once_and_matches_a_single_compile(cache_dir, tmp_path):
    from cuopjit.build.compiler import CompileOptions, compile_cubin
    reference = compile_cubin(TINY_KERNEL, "twice_sm80", CompileOptions(arch="sm_80")).cubin
    log, n = tmp_path / "builds.log", 6
    barrier, results = CTX.Barrier(n), CTX.Queue()
    procs = [CTX.Process(target=_real_worker, args=(cache_dir, barrier, log, results)) for _ in range(n)]
    got = _run_all(procs, results)
    assert [err for _, _, err in got if err] == []
    assert all(cubin == reference for _, cubin, _ in got)
    assert list(build_counts(log).values()) == [1]
    assert temp_files(cache_dir) == []


def _store_forever(root):
    """Store 1 MiB entries in a loop, with the gap between write and rename widened, until killed."""
    real_replace = os.replace

    def slow_replace(src, dst):
        time.sleep(0.001)
        real_replace(src, dst)
    os.replace = slow_replace
    cache = KernelCache(root)
    i = 0
    while True:
        spec = make_spec(i % 6)
        cache.get_or_build(spec, lambda: fake_cubin(spec, 1 << 20))
        cache._memory.clear()
        cache.layer.entry_path(spec).unlink(missing_ok=True)
        i += 1


def test_sigkill_during_stores_never_leaves_a_partial_entry(cache_dir):
    rng = random.Random(11)
    specs = [make_spec(i) for i in range(6)]
    for _ in range(50):
        p = CTX.Process(target=_store_forever, args=(cache_dir,))
        p.start()
        time.sleep(rng.uniform(0.002, 0.03))
        os.kill(p.pid, signal.SIGKILL)
        p.join()
        report = KernelCache(cache_dir).verify()
        assert report.bad == []
    cache = KernelCache(cache_dir)
    for s in specs:
        assert cache.get_or_build(s, lambda s=s: fake_cubin(s, 1 << 20))[0] == fake_cubin(s, 1 << 20)
    assert cache.stats().rejected == 0
    cache.verify(fix=True)
    assert temp_files(cache_dir) == []


def _hold_lock_then(root, spec, ready, action):
    cache = KernelCache(root)

    def build() -> bytes:
        ready.set()
        if action == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(30)
        return fake_cubin(spec)
    cache.get_or_build(spec, build)


@pytest.mark.parametrize("action", ["die", "hang"])
def test_waiter_never_deadlocks_on_a_dead_or_stuck_holder(action, cache_dir, tmp_path, caplog):
    spec = make_spec(1)
    ready = CTX.Event()
    holder = CTX.Process(target=_hold_lock_then, args=(cache_dir, spec, ready, action))
    holder.start()
    try:
        assert ready.wait(20)
        config = get_default_global_jit_config()
        saved, config.compilation_timeout = config.compilation_timeout, 0.5
        try:
            start = time.monotonic()
            log = tmp_path / "builds.log"
            assert KernelCache(cache_dir).get_or_build(spec, counting_build(spec, log)) == (fake_cubin(spec), False)
            assert time.monotonic() - start < 5
        finally:
            config.compilation_timeout = saved
        if action == "hang":
            assert f"another process has been compiling {spec.name} for over 0.5 s (compilation_timeout)" in caplog.text
    finally:
        holder.kill()
        holder.join()
