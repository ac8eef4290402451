"""The backend's prebuild (cuopjit/torch/prebuild.py): kernels the cache holds are read in a plain loop on the
calling thread, missing ones compile in a thread pool; with a device each is loaded through get_function, called
with the executor's positional arguments (so the first call's loads are memo hits). CPU only."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

pytest.importorskip("torch")
prebuild = pytest.importorskip("cuopjit.torch.prebuild")

from cuopjit.config import DEFAULT  # noqa: E402


def _setup(monkeypatch, cached: set):
    calls = []
    monkeypatch.setattr(prebuild, "plan_of", lambda op, settings, args, kwargs: (
        SimpleNamespace(specs=list(op)), SimpleNamespace(arch="sm_90")))
    monkeypatch.setattr(prebuild.pipeline, "is_cached", lambda spec, arch, cache_dir=None: spec in cached)
    main = threading.main_thread()

    def record(kind):
        return lambda *args: calls.append((kind, args, threading.current_thread() is main))
    monkeypatch.setattr(prebuild.pipeline, "build", record("build"))
    monkeypatch.setattr(prebuild.pipeline, "get_function", record("load"))
    return calls


def test_cached_kernels_are_read_in_order_and_missing_ones_compile_in_the_pool(monkeypatch):
    calls = _setup(monkeypatch, {"a", "c"})
    samples = [prebuild.Sample(("a", "b"), DEFAULT, (), {}), prebuild.Sample(("c", "a", "d"), DEFAULT, (), {})]
    assert prebuild.build_all(samples) == 4
    assert [(c[1][0], c[2]) for c in calls[:2]] == [("a", True), ("c", True)]
    assert sorted((c[1][0], c[2]) for c in calls[2:]) == [("b", False), ("d", False)]
    assert all(c[0] == "build" and c[1][1:] == ("sm_90", DEFAULT.cache_dir, DEFAULT.persistent) for c in calls)


def test_with_a_device_each_kernel_is_loaded_as_the_executor_loads_it(monkeypatch):
    calls = _setup(monkeypatch, {"a"})
    assert prebuild.build_all([prebuild.Sample(("a", "b"), DEFAULT, (), {})], 0) == 2
    assert {c[0] for c in calls} == {"load"}
    assert sorted(c[1] for c in calls) == [(s, 0, DEFAULT.cache_dir, DEFAULT.persistent) for s in "ab"]


def test_a_sample_that_cannot_be_planned_is_skipped(monkeypatch):
    _setup(monkeypatch, set())

    def refuse(*args):
        raise ValueError("no")
    monkeypatch.setattr(prebuild, "plan_of", refuse)
    assert prebuild.build_all([prebuild.Sample(("a",), DEFAULT, (), {})]) == 0
