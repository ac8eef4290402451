"""Auto-tuning (GlobalJITConfig.enable_auto_tuning): time a family's choices once per problem, keep the fastest.

Runs only when a plan is made (the first forward of a shape under a wrapper's settings), never on
a warm forward. Each timing is one entry of a record in the cache, keyed by family, shape bucket,
dtype and device identity (name, SM count, arch, driver), so a new choice never discards earlier
timings and another process on the same GPU model reuses them. Trials run on copies of the
tensor arguments: in-place operators never see their inputs changed more than once.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from . import driver, executor
from .plan import Plan
from .profile import EventPair
from .settings import RunSettings
from .target import Target
from .tensor import Tensor, empty

RUNS = 5
_memory_records: dict[str, dict] = {}


def _bucket(value: Any) -> str:
    """Sizes rounded up to a power of two, so nearby shapes share a tuning record."""
    if isinstance(value, bool) or not isinstance(value, int):
        return str(value)
    return str(1 << max(0, value - 1).bit_length())


def record_key(family: str, problem: Any, target: Target) -> str:
    """family|problem bucket|device identity: the key of one tuning record."""
    fields = ",".join(f"{f.name}={_bucket(getattr(problem, f.name))}" for f in dataclasses.fields(problem)
                      if not isinstance(getattr(problem, f.name), float))
    return f"{family}|{fields}|{target.name}|{target.sm_count}|{target.arch}|{driver.driver_version()}"


def _load(settings: RunSettings, key: str) -> dict:
    if not settings.persistent:
        return dict(_memory_records.get(key, {}))
    from .cache import get_cache
    return get_cache(settings.cache_dir).load_record("tuning", key) or {}


def _store(settings: RunSettings, key: str, value: dict) -> None:
    if not settings.persistent:
        _memory_records[key] = dict(value)
        return
    from .cache import get_cache
    get_cache(settings.cache_dir).store_record("tuning", key, value)


def _copy(value: Any) -> Any:
    if not isinstance(value, Tensor):
        return value
    out = empty(value.shape, value.dtype)
    out.copy_from(value)
    return out


def _time(run, pointers: tuple, stream: int) -> float:
    run(pointers, stream)
    events = EventPair()
    events.record_start(stream)
    for _ in range(RUNS):
        run(pointers, stream)
    events.record_end(stream)
    return events.elapsed_ms() / RUNS


def fastest(op: Any, problem: Any, choices: Sequence[Any], settings: RunSettings, target: Target,
            args: tuple, kwargs: dict, stream: int = 0) -> Plan:
    """The plan of the fastest of `choices` on this device, timing only those the record lacks."""
    key = record_key(op.family.name, problem, target)
    timings = _load(settings, key)
    labels = {c.label: c for c in choices}
    missing = [label for label in labels if label not in timings]
    if missing:
        trial_args = tuple(_copy(a) for a in args)
        trial_kwargs = {k: _copy(v) for k, v in kwargs.items()}
        _, pointers, _ = op.bind(*trial_args, **trial_kwargs)
        ordinal = driver.current_ordinal()
        for label in missing:
            run = executor.load(op.family.plan(problem, labels[label], target), ordinal, settings)
            timings[label] = _time(run, pointers, stream)
        _store(settings, key, timings)
    best = min(labels, key=lambda label: timings[label])
    return op.family.plan(problem, labels[best], target)
