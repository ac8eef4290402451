"""Every kernel of a compiled graph built at once, in parallel, before its first call runs them one by one.

A graph's kernels would otherwise compile in its first call, one after another, as each operator meets
its first input (NVRTC, a few tenths of a second each for a conv or GEMM; a ResNet-50 has dozens). The
backend knows every operator's shapes from the graph's fake values, so `build_all(samples)` plans each
one on placeholders (cuopjit.listing.plan_of: tensors of no memory) and builds the plans' kernels in a
thread pool (NVRTC runs outside Python's lock) into the kernel cache; the first call then loads them
from the cache. With a warm cache this only reads the entries. A plan that cannot be made here (an
operator that refuses the placeholders' layout) is skipped: its first call plans and builds it as before.
"""
from __future__ import annotations

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
    try:
        plan, target = plan_of(sample.operator, sample.settings, sample.args, sample.kwargs)
    except (CuopjitError, ValueError, TypeError, LookupError):
        return []
    return [(spec, target.arch) for spec in plan.specs]


def build_all(samples: list[Sample]) -> int:
    """Build the kernels of every sample's plan in parallel; the number of distinct kernels."""
    wanted = list(dict.fromkeys(item for s in samples for item in _specs(s)))
    if not wanted:
        return 0
    with ThreadPoolExecutor(max_workers=min(len(wanted), os.cpu_count() or 4)) as pool:
        failed = [exc for exc in pool.map(_build, wanted) if exc is not None]
    if failed:   # the first call compiles it again and raises there, naming the operator
        log.logger().debug("prebuild: %d kernels failed to build: %s", len(failed), failed[0])
    return len(wanted)


def _build(item: tuple) -> Exception | None:
    try:
        pipeline.build(*item)
    except Exception as exc:  # noqa: BLE001  reported by the first call that needs the kernel
        return exc
    return None
