"""Shared pieces of the memory-bound benchmark (benchmarks/memory_bound.py).

Workload format: each `mb_*.py` module exports `WORKLOADS`, a list of dicts:

    {
      "name":  "axpy",                # what --only matches (substring); unique together with dtype
      "dtype": "float32",             # "float32" / "float64" (what --dtype filters on)
      "shape": [268435456],           # for the table and the JSON, informational
      "bytes": 3 * 2**30,             # bytes one call must move (each input read once, each output written once)
      "min_bytes": 3 * 2**30,         # optional: what the algorithm must move at least (default: bytes)
      "min_note": "why",              # optional: why min_bytes differs from bytes, or how it is reached
      "goal":  ">= 0.97x PyTorch and >= 93% of copy",   # human-readable
      "goal_torch": 0.97,             # ratio cuopjit/PyTorch throughput required (None: no such goal)
      "goal_copy": 0.93,              # fraction of the copy bandwidth required (None: no such goal)
      "setup": callable,              # () -> dict(run_cuopjit=f(i), run_torch=g(i), check=h() or None)
    }

`setup` allocates the buffers only when the workload runs (so 1 GiB workloads don't all live
at once) and returns the two callables; each takes the iteration number `i` so that
workloads small enough to sit in L2 can rotate among several buffer sets (`rotation()`).
`check()` (optional) returns a relative error of cuopjit against PyTorch, computed once.
A dict may also carry "run_cuopjit"/"run_torch" directly instead of "setup".

Timing: `time_ms(fn)` records a pair of CUDA events around each call (after warm-up; calls
under 0.5 ms in batches of back-to-back calls) and returns the median of at least 20; `time_pair(mine,
theirs)` times cuopjit and the library it is compared with in alternating rounds, so clock drift within
a run falls on both. The copy reference (`copy_bandwidth`) is a 1 GiB
torch `copy_` measured in the same run.
"""
from __future__ import annotations

import statistics
from typing import Callable

GIB = 1 << 30
L2_BYTES = 50 * 10**6  # H100; rotate buffers while a call's bytes stay under 4x this


def rotation(bytes_per_call: int, l2_bytes: int = L2_BYTES) -> int:
    """How many buffer sets to rotate among so that repeated calls don't hit in L2."""
    if bytes_per_call >= 4 * l2_bytes:
        return 1
    return max(2, -(-4 * l2_bytes // max(bytes_per_call, 1)))


def _inner(fn: Callable[[int], object], warmup: int, batch_ms: float) -> int:
    """Warm `fn` up and return how many calls one pair of events should span (calls under `batch_ms` batched)."""
    import torch
    for i in range(warmup):
        fn(i)
    torch.cuda.synchronize()
    probe_s, probe_e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    probe_s.record()
    for i in range(warmup):
        fn(i)
    probe_e.record()
    torch.cuda.synchronize()
    per_call = probe_s.elapsed_time(probe_e) / warmup
    return max(1, min(100, int(batch_ms / max(per_call, 1e-4)))) if per_call < batch_ms else 1


def _timed(fn: Callable[[int], object], repeat: int, inner: int, k: int) -> list[float]:
    """`repeat` event-timed batches of `inner` calls of fn(k), fn(k + 1), ...: milliseconds per call."""
    import torch
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeat)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeat)]
    for i in range(repeat):
        starts[i].record()
        for _ in range(inner):
            fn(k)
            k += 1
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) / inner for s, e in zip(starts, ends)]


def _summary(times: list[float], inner: int, **extra) -> dict:
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times), "n": len(times),
            "inner": inner, **extra}


def time_ms(fn: Callable[[int], object], warmup: int = 5, repeat: int = 30, min_repeat: int = 20,
            batch_ms: float = 0.5) -> dict:
    """Median / min / max milliseconds per call of fn(i), measured with CUDA events.

    Calls shorter than `batch_ms` are timed `inner` at a time between one pair of events (and
    divided), so that host launch overhead between back-to-back calls does not count as GPU time
    for either library; `inner` is reported.
    """
    inner = _inner(fn, warmup, batch_ms)
    return _summary(_timed(fn, max(repeat, min_repeat), inner, warmup), inner)


def time_pair(mine: Callable[[int], object], theirs: Callable[[int], object], rounds: int = 4, repeat: int = 10,
              warmup: int = 5, batch_ms: float = 0.5) -> tuple[dict, dict]:
    """time_ms of cuopjit (`mine`) and the library it is compared with (`theirs`), measured in alternating
    rounds (mine, theirs, theirs, mine, ...): the H100's clock drifts with power and heat within a run
    (torch's DGEMM moved 47-58 TFLOP/s), so both sides get the same share of every state. Each dict adds
    the per-round medians (`rounds_ms`)."""
    inner = (_inner(mine, warmup, batch_ms), _inner(theirs, warmup, batch_ms))
    times, per_round, k = ([], []), ([], []), warmup
    for r in range(rounds):
        for side in ((0, 1) if r % 2 == 0 else (1, 0)):
            got = _timed((mine, theirs)[side], repeat, inner[side], k)
            k += repeat * inner[side]
            times[side].extend(got)
            per_round[side].append(round(statistics.median(got), 5))
    return tuple(_summary(times[s], inner[s], rounds_ms=per_round[s]) for s in (0, 1))


def copy_bandwidth(nbytes: int = GIB) -> dict:
    """The device's copy bandwidth through torch `copy_` (bytes read + written per second)."""
    import torch
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").normal_()
    dst = torch.empty_like(src)
    bufs = [src, dst]
    t = time_ms(lambda i: bufs[1].copy_(bufs[0]))
    bufs.clear()
    del src, dst
    torch.cuda.empty_cache()
    return {"bytes": 2 * nbytes, **t, "gbps": 2 * nbytes / t["median_ms"] / 1e6}


def copy_bandwidth_at(nbytes: int, repeat: int = 30) -> float:
    """GB/s of a torch `copy_` moving `nbytes` (read + write), rotating buffers as the workloads do: the
    copy figure at a workload's own size (short kernels lose their launch and ramp to the copy as well)."""
    import torch
    n = max(1, nbytes // 8)
    k = rotation(nbytes)
    src = [torch.empty(n, dtype=torch.float32, device="cuda").normal_() for _ in range(k)]
    dst = [torch.empty_like(src[0]) for _ in range(k)]
    t = time_ms(lambda i: dst[i % k].copy_(src[i % k]), repeat=repeat)
    src.clear()
    dst.clear()
    torch.cuda.empty_cache()
    return 8 * n / t["median_ms"] / 1e6


def to_cuopjit(t):
    """A cuopjit Tensor sharing `t`'s memory (DLPack), or a device copy if zero-copy wrapping fails."""
    import cuopjit
    try:
        return cuopjit.tensor(t)
    except Exception as exc:  # interop trouble: fall back to a copy through the host
        print(f"  (zero-copy wrap failed: {type(exc).__name__}: {exc}; copying through the host)")
        return cuopjit.tensor(t.detach().cpu().numpy())


def torch_dtype(name: str):
    import torch
    return {"float32": torch.float32, "float64": torch.float64}[name]
