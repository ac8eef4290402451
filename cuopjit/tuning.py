"""Auto-tuning (GlobalJITConfig.enable_auto_tuning): time an operator's candidate configs, keep the fastest.

Each timing is one record in the cache, keyed by operator, shape bucket, dtype and device
identity (name, SM count, arch, driver), so a new candidate never discards earlier timings and
another process on the same GPU model reuses them. Tuning runs on copies of the tensor
arguments: in-place operators never see their inputs changed more than once.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from . import driver
from .config import ConfigSnapshot, JITConfig
from .kernels import MEMORY_ONLY
from .ops.base import Operator
from .profile import EventPair
from .tensor import Tensor, empty

RUNS = 5
_memory_records: dict[str, dict] = {}


def _bucket(args: tuple) -> str:
    """Shapes with each dimension rounded up to a power of two: nearby sizes share a tuning result."""
    shapes = []
    for a in args:
        if isinstance(a, Tensor):
            shapes.append("x".join(str(1 << max(0, d - 1).bit_length()) for d in a.shape))
    return ",".join(shapes)


def record_key(op: Operator, args: tuple) -> str:
    dev = driver.get_device()
    return (f"{type(op).__name__}|{_bucket(args)}|{dev.name}|{dev.sm_count}|{dev.arch}|"
            f"{driver.driver_version()}")


def config_label(cfg: ConfigSnapshot) -> str:
    """'tile_size=64,block_size=128': the fields that differ from the defaults."""
    default = JITConfig().snapshot()
    diff = [f"{f.name}={getattr(cfg, f.name)}" for f in dataclasses.fields(cfg)
            if getattr(cfg, f.name) != getattr(default, f.name)]
    return ",".join(diff) or "default"


def _load(directory: str | None, key: str) -> dict:
    if directory == MEMORY_ONLY:
        return dict(_memory_records.get(key, {}))
    from .cache import get_cache
    return get_cache(directory).load_record("tuning", key) or {}


def _store(directory: str | None, key: str, value: dict) -> None:
    if directory == MEMORY_ONLY:
        _memory_records[key] = dict(value)
        return
    from .cache import get_cache
    get_cache(directory).store_record("tuning", key, value)


def _copies(args: tuple) -> tuple:
    out = []
    for a in args:
        if isinstance(a, Tensor):
            c = empty(a.shape, a.dtype)
            c.copy_from(a)
            out.append(c)
        else:
            out.append(a)
    return tuple(out)


def _time(op: Operator, args: tuple, kwargs: dict) -> float:
    op.forward(*args, **kwargs)
    events = EventPair()
    events.record_start()
    for _ in range(RUNS):
        op.forward(*args, **kwargs)
    events.record_end()
    return events.elapsed_ms() / RUNS


def tuned_config(op: Operator, config: JITConfig, directory: str | None, args: tuple,
                 kwargs: dict[str, Any]) -> ConfigSnapshot:
    """The fastest of `op.tuning_candidates(config)` on these arguments (the config itself if none)."""
    base = config.snapshot()
    candidates = op.tuning_candidates(base)
    if not candidates:
        return base
    key = record_key(op, args)
    timings = _load(directory, key)
    labels = {config_label(c): c for c in candidates}
    missing = [label for label in labels if label not in timings]
    if missing:
        trial = _copies(args)
        for label in missing:
            op._configure(labels[label], directory)
            timings[label] = _time(op, trial, kwargs)
            _store(directory, key, timings)
    best = min((label for label in labels), key=lambda label: timings[label])
    return labels[best]
