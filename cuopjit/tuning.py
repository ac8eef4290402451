"""Auto-tuning (GlobalJITConfig.enable_auto_tuning): time a family's choices once per problem, keep the fastest.

Runs only when a plan is made (the first forward of a shape under a wrapper's settings), never on
a warm forward. Each timing is one record in the cache (kind "tuning"), one per choice, keyed by
family, shape bucket, dtype, transposes, precision and device identity (name, SM count, arch,
driver) plus the choice's label: a new choice never discards earlier timings, another process on
the same GPU model reuses them without timing, and a bundle carries them to other machines (the
cache's records travel with its cubins). Sizes share a record within their power-of-two bucket;
a convolution's window (kernel size, stride, padding, dilation, groups) never does: it is the code.
Trials run on copies of the tensor arguments (same shape, dtype and layout): in-place operators never
see their inputs changed more than once. `time_choices` times choices without any record (what
`benchmarks/layers.py --check-heuristics` compares the heuristic's pick with).
"""
from __future__ import annotations

import dataclasses
import statistics
from typing import Any, Callable, Sequence

from .device import driver
from .run import executor
from .run.plan import Plan
from .device.events import EventPair
from .config import RunSettings
from .target import Target
from .tensor import Tensor, empty
from .cache import get_cache

KIND = "tuning"
RUNS = 5          # calls per timed batch
SAMPLES = 3       # timed batches per choice: the median is its time
# Problem fields kept exact in a record key: a convolution's window and groups decide the kernel's code.
EXACT = frozenset({"kh", "kw", "sh", "sw", "ph", "pw", "dh", "dw", "groups"})
_memory_records: dict[str, dict] = {}
Progress = Callable[[int, int, str], None]


def _bucket(name: str, value: Any) -> str:
    """Sizes rounded up to a power of two, so nearby shapes share a tuning record (EXACT fields as they are)."""
    if isinstance(value, bool) or not isinstance(value, int) or name in EXACT:
        return str(value)
    return str(1 << max(0, value - 1).bit_length())


def record_key(family: str, problem: Any, target: Target, precision: str = "tf32") -> str:
    """family|problem bucket|precision|device identity: what every record of one problem's choices shares."""
    fields = ",".join(f"{f.name}={_bucket(f.name, getattr(problem, f.name))}" for f in dataclasses.fields(problem)
                      if not isinstance(getattr(problem, f.name), float))
    return (f"{family}|{fields}|precision={precision}|{target.name}|{target.sm_count}|{target.arch}|"
            f"{driver.driver_version()}")


def choice_key(key: str, label: str) -> str:
    """The record key of one choice's timing."""
    return f"{key}|{label}"


def _load(settings: RunSettings, key: str) -> dict | None:
    if not settings.persistent:
        found = _memory_records.get(key)
        return dict(found) if found is not None else None
    return get_cache(settings.cache_dir).load_record(KIND, key)


def _store(settings: RunSettings, key: str, value: dict) -> None:
    if not settings.persistent:
        _memory_records[key] = dict(value)
        return
    get_cache(settings.cache_dir).store_record(KIND, key, value)


def timings(settings: RunSettings, key: str, labels: Sequence[str]) -> dict[str, float]:
    """Milliseconds per call of each of `labels` that has a record under `key` (others are absent)."""
    found = {}
    for label in labels:
        record = _load(settings, choice_key(key, label))
        if record is not None and isinstance(record.get("ms"), (int, float)):
            found[label] = float(record["ms"])
    return found


def _copy(value: Any) -> Any:
    """A new tensor with `value`'s shape, dtype, layout and contents; other arguments as they are."""
    if not isinstance(value, Tensor):
        return value
    out = empty(value.shape, value.dtype, value.layout)
    out.copy_from(value)
    return out


def _time(run, pointers: tuple, stream: int, runs: int = RUNS) -> float:
    """Milliseconds per call of `run`: one warm-up call, then the median of SAMPLES event-timed batches of `runs`."""
    run(pointers, stream)
    events, got = EventPair(), []
    for _ in range(SAMPLES):
        events.record_start(stream)
        for _ in range(runs):
            run(pointers, stream)
        events.record_end(stream)
        got.append(events.elapsed_ms() / runs)
    return statistics.median(got)


def time_choices(op: Any, problem: Any, choices: Sequence[Any], settings: RunSettings, target: Target,
                 args: tuple, kwargs: dict, stream: int = 0, progress: Progress | None = None,
                 runs: int = RUNS) -> dict[str, float]:
    """Milliseconds per call of each choice's plan (by label; one entry per distinct label), timed on copies of
    the arguments on this device; no record is read or written. `progress(done, total, label)` is called
    before each trial and once at the end."""
    labels = {c.label: c for c in choices}
    trial_args = tuple(_copy(a) for a in args)
    trial_kwargs = {k: _copy(v) for k, v in kwargs.items()}
    _, pointers, _ = op.bind(*trial_args, **trial_kwargs)
    ordinal, out = driver.current_ordinal(), {}
    for i, label in enumerate(labels):
        if progress is not None:
            progress(i, len(labels), label)
        run = executor.load(op.family.plan(problem, labels[label], target), ordinal, settings)
        out[label] = _time(run, pointers, stream, runs)
    if progress is not None:
        progress(len(labels), len(labels), "")
    return out


def fastest(op: Any, problem: Any, choices: Sequence[Any], settings: RunSettings, target: Target,
            args: tuple, kwargs: dict, stream: int = 0, progress: Progress | None = None) -> Plan:
    """The plan of the fastest of `choices` on this device, timing only those without a record (and storing
    a record for each one timed). `progress(done, total, label)` is called before each trial."""
    key = record_key(op.family.name, problem, target, settings.config.precision)
    labels = {c.label: c for c in choices}
    known = timings(settings, key, list(labels))
    missing = [labels[label] for label in labels if label not in known]
    if missing:
        timed = time_choices(op, problem, missing, settings, target, args, kwargs, stream, progress)
        for label, ms in timed.items():
            _store(settings, choice_key(key, label), {"ms": ms, "runs": RUNS * SAMPLES, "choice": label,
                                                      "problem": key})
        known.update(timed)
    best = min(labels, key=lambda label: known[label])
    return op.family.plan(problem, labels[best], target)
