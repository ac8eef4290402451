"""Every kernel of a compiled graph built (in parallel) and loaded before its first call runs them.

A graph's kernels would otherwise compile in its first call, one after another, as each operator meets
its first input (NVRTC, a few tenths of a second each for a conv or GEMM; a ResNet-50 has dozens). The
backend knows every operator's shapes from the graph's fake values, so `build_all(samples, ordinal)` plans
each one on placeholders (cuopjit.listing.plan_of: tensors of no memory) and gets the plans' kernels in a
thread pool (NVRTC runs outside Python's lock; kernels the cache holds are read in a plain loop): with a
device, loaded there through the pipeline's memo (`get_function`, called as the executor calls it, so the
first call's loads are memo hits: no second render, cache read or module load); without one, built into
the kernel cache. A plan that cannot be made here (an operator that refuses the placeholders' layout) is
skipped: its first call plans and builds it.
"""
from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .. import log
from ..build import pipeline
from ..config import DEFAULT, RunSettings
from ..errors import CuopjitError
from ..listing import plan_of


@dataclass(frozen=True)
class Sample:
    """One operator's forward as the graph will call it: shapes (tuples) or NumPy arrays for its tensors."""
    operator: Any
    settings: RunSettings
    args: tuple
    kwargs: dict


def settings_of(run: Any, operator: Any) -> RunSettings:
    """The settings `run` (the operator itself or a JIT wrapper of it with its own config) plans under."""
    return DEFAULT if run is operator else RunSettings.of(run.get_jit_config().snapshot())


def _specs(sample: Sample) -> list:
    """The sample's kernels: (spec, arch, cache_dir, persistent) each."""
    try:
        plan, target = plan_of(sample.operator, sample.settings, sample.args, sample.kwargs)
    except (CuopjitError, ValueError, TypeError, LookupError):
        return []
    settings = sample.settings
    return [(spec, target.arch, settings.cache_dir, settings.persistent) for spec in plan.specs]


def _cached(item: tuple) -> bool:
    spec, arch, cache_dir, persistent = item
    try:
        return persistent and pipeline.is_cached(spec, arch, cache_dir)
    except Exception:  # noqa: BLE001  an unreadable entry: built like a missing one
        return False


def build_all(samples: list[Sample], ordinal: int | None = None) -> int:
    """Get the kernels of every sample's plan (loaded on device `ordinal`, else built only); the number of
    distinct kernels. Those the cache lacks compile in a thread pool; those it holds are read (and loaded)
    one after another: that is rendering and reading, which hold Python's lock (threads would take turns at
    it, twice as slow as a plain loop with a warm cache)."""
    wanted = list(dict.fromkeys(item for s in samples for item in _specs(s)))
    if not wanted:
        return 0
    cached = [item for item in wanted if _cached(item)]
    held = set(cached)
    missing = [item for item in wanted if item not in held]
    get = functools.partial(_get, ordinal)
    failed = [exc for exc in map(get, cached) if exc is not None]
    if missing:
        with ThreadPoolExecutor(max_workers=min(len(missing), os.cpu_count() or 4)) as pool:
            failed += [exc for exc in pool.map(get, missing) if exc is not None]
    if failed:   # the first call compiles it again and raises there, naming the operator
        log.logger().debug("prebuild: %d kernels failed to build: %s", len(failed), failed[0])
    return len(wanted)


def _get(ordinal: int | None, item: tuple) -> Exception | None:
    """Build one kernel, or with a device load it there through the pipeline's memo (positional arguments,
    as executor.load passes them: one memo entry)."""
    spec, arch, cache_dir, persistent = item
    try:
        if ordinal is None:
            pipeline.build(spec, arch, cache_dir, persistent)
        else:
            pipeline.get_function(spec, ordinal, cache_dir, persistent)
    except Exception as exc:  # noqa: BLE001  reported by the first call that needs the kernel
        return exc
    return None
