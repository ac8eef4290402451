"""Shared fixtures: a private cache per test, fresh random inputs, and the `gpu` marker's skip."""
from __future__ import annotations

import os
import secrets
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from cuopjit.config import scoped_env

# Hypothesis profiles of the property-based GPU tests (tests/test_properties_*.py): "cuopjit", loaded here, a short
# run (a few dozen examples per test, no deadline: a first call compiles its kernels); "long" for a longer hunt on
# a GPU machine: `pytest -m gpu --hypothesis-profile=long`. Failing examples are saved in tests/.hypothesis_examples,
# committed, so a failure found on a GPU machine replays first on every later run there until it passes (then
# Hypothesis drops it; a fixed bug is pinned by an @example or a regression test of its own).
try:
    from hypothesis import HealthCheck, settings
    from hypothesis.database import DirectoryBasedExampleDatabase
except ImportError:     # hypothesis comes with the test extra; without it the property tests skip (importorskip)
    pass
else:
    _PROPERTIES = dict(deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow],
                       database=DirectoryBasedExampleDatabase(str(Path(__file__).parent / ".hypothesis_examples")))
    settings.register_profile("cuopjit", max_examples=25, **_PROPERTIES)
    settings.register_profile("long", max_examples=400, **_PROPERTIES)
    settings.load_profile("cuopjit")


def _has_gpu() -> bool:
    from cuopjit import get_device_count
    return get_device_count() > 0


def pytest_collection_modifyitems(config, items):
    if any("gpu" in item.keywords for item in items) and not _has_gpu():
        skip = pytest.mark.skip(reason="no NVIDIA GPU on this machine")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def session_cache(tmp_path_factory):
    """Tests never touch the user's cache: the session shares one fresh CUOPJIT_CACHE_DIR."""
    with scoped_env(cache_dir=str(tmp_path_factory.mktemp("cuopjit-cache"))):
        yield


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """Each test sees warn_once's first warnings, whatever this process ran before (mutmut reruns the suite)."""
    from cuopjit import log
    monkeypatch.setattr(log, "_warned", set())


@pytest.fixture
def cache_dir(tmp_path):
    """An empty cache directory of this test's own (CUOPJIT_CACHE_DIR), for tests about the cache."""
    path = tmp_path / "cuopjit-cache"
    with scoped_env(cache_dir=str(path)):
        yield path


@pytest.fixture(scope="session")
def unprivileged():
    """Runs scenarios as an unprivileged user (nobody when the tests run as root), so permissions bind."""
    from unprivileged import make_runner
    runner = make_runner()
    yield runner
    runner.cleanup()


@pytest.fixture
def rng(request):
    """Fresh random inputs on every run; the seed is printed so a failure can be replayed."""
    seed = int(os.environ.get("CUOPJIT_TEST_SEED") or secrets.randbits(32))
    print(f"{request.node.name}: seed {seed} (CUOPJIT_TEST_SEED={seed} replays it)")
    return np.random.default_rng(seed)


def make_config(**fields):
    """A JITConfig with these fields set (each assignment validated, as a user's would be)."""
    from cuopjit import JITConfig
    cfg = JITConfig()
    for name, value in fields.items():
        setattr(cfg, name, value)
    return cfg


def rel_error(out: np.ndarray, ref: np.ndarray) -> float:
    """‖out − ref‖ / ‖ref‖ in float64; NaN anywhere in `out` gives inf."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if not np.all(np.isfinite(out)):
        return float("inf")
    denom = np.linalg.norm(ref)
    return float(np.linalg.norm(out - ref) / (denom if denom else 1.0))


_BUILT: set = set()   # (kernel spec, arch) pairs compiled in this session


def family_plans(family, fields: dict, t) -> list:
    """The plans of every representative problem of `family` under a config with `fields`, for target `t`."""
    cfg = make_config(**fields).snapshot()
    return [family.default_plan(p, cfg, t) for p in family.problems()]


def compiles_without_spills(specs, arch: str, workers: int = 2) -> None:
    """Each kernel spec compiles for `arch` (NVRTC, `workers` at a time, nothing stored) to a cubin that spills no
    register."""
    from cuopjit.build import pipeline
    specs = list(specs)
    with ThreadPoolExecutor(workers) as pool:
        for spec, (cubin, info) in zip(specs, pool.map(lambda s: pipeline.build(s, arch, persistent=False), specs)):
            assert cubin[:4] == b"\x7fELF" and info.spill_bytes == 0, f"{spec.name} spills {info.spill_bytes} B on {arch}"


def build_once(plans, t) -> None:
    """Each plan fits target `t`, and each of its kernels compiles for `t` (once per test session)."""
    from cuopjit.build import pipeline
    for plan in plans:
        plan.check_target(t)
        for spec in plan.specs:
            if (spec, t.arch) not in _BUILT:
                assert pipeline.build(spec, t.arch, persistent=False)[0][:4] == b"\x7fELF"
                _BUILT.add((spec, t.arch))


# The configurations the cuOP documents (README, tuning guide, config reference): every family must run them.
SEED = dict(kernel_type="tiled", tile_size=32, block_size=256, optimization_level="O2", enable_tensor_core=True,
            enable_tma=True, max_registers=255)
SEED_CONFIGS = [dict(kernel_type=k, tile_size=t, block_size=256)
                for k in ("auto", "simple", "tiled", "warp_optimized", "tensor_core") for t in (16, 32, 64, 128)]
SEED_CONFIGS.append(SEED)


# --- guard regions: a write past either end of an output changes a canary ------------------------------
_CANARY = {np.dtype(np.float32): np.uint32(0xA5A5A5A5), np.dtype(np.float64): np.uint64(0xA5A5A5A5A5A5A5A5),
           np.dtype(np.float16): np.uint16(0xA5A5), np.dtype(ml_dtypes.bfloat16): np.uint16(0xA5A5)}


def guarded(shape, dtype="float32", fill=None, pad: int | None = None):
    """An output Tensor inside a larger allocation: `pad` canary elements before and after it (default one
    row, at least 256, a multiple of 64 so alignment is kept), the output itself NaN-poisoned (or `fill`)."""
    import math

    import cuopjit
    from cuopjit.tensor import Tensor
    dt, shape = np.dtype(dtype), (int(shape),) if np.ndim(shape) == 0 else tuple(int(d) for d in shape)
    n = math.prod(shape)
    pad = pad if pad is not None else -(-max(256, shape[-1] if shape else 1) // 64) * 64
    host = np.full(2 * pad + n, _CANARY[dt]).view(dt)
    host[pad:pad + n] = np.nan if fill is None else np.asarray(fill, dtype=dt).ravel()
    base = cuopjit.tensor(host)
    return Tensor._view(base.ptr + pad * dt.itemsize, shape, dt, base.device, base)


def check_guards(t) -> None:
    """Assert that the canaries around a `guarded` output are unchanged (no out-of-bounds write)."""
    base, dt = t._owner, t.dtype
    words = base.to_numpy().view(_CANARY[dt].dtype)
    pad = (t.ptr - base.ptr) // dt.itemsize
    before = np.flatnonzero(words[:pad] != _CANARY[dt])
    after = np.flatnonzero(words[pad + t.size:] != _CANARY[dt])
    assert before.size == 0 and after.size == 0, (
        f"out-of-bounds write around an output of shape {list(t.shape)}: {before.size} elements changed before it "
        f"(nearest {pad - before.max() if before.size else '-'} before), {after.size} after it "
        f"(first {after.min() if after.size else '-'} past the end)")
