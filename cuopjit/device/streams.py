"""Streams: which CUDA stream a forward runs on.

`forward(..., stream=s)` takes a cuopjit `Stream`, a torch or CuPy stream, anything with
`__cuda_stream__`, a cuda.bindings CUstream or a raw handle (int). Without one, the current
stream of the innermost `with cuopjit.stream(s):` on this thread, else the legacy default stream
(handle 0), so work stays ordered with torch's and CuPy's default streams.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

from . import driver
from ..errors import check

class _Current(threading.local):
    """Per-thread state; the class attributes are every new thread's defaults (no attribute miss)."""
    stream = 0                 # the current stream's handle
    relaxed_capture = False    # inside `with cuopjit.graph()`


local = _Current()                # this thread's current stream (`local.stream`), read on every forward
_resolved: dict[int, tuple[Any, int]] = {}   # id(stream object) -> (the object, its handle); bounded
recent: list[tuple[Any, int]] = [(None, 0)]  # [(the last stream object resolved, its handle)]: forward's one-probe path
_RESOLVED_KEPT = 256


class Stream:
    """A CUDA stream of cuopjit's own (non-blocking with respect to the legacy default stream)."""

    def __init__(self, device: int | None = None, priority: int = 0):
        drv = driver.api()
        self.device = driver.get_device(device).ordinal
        flags = drv.CUstream_flags.CU_STREAM_NON_BLOCKING
        self._stream = check(drv.cuStreamCreateWithPriority(flags, priority), "cuStreamCreateWithPriority")
        self.handle = int(self._stream)

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)

    def synchronize(self) -> None:
        """Wait for everything queued on this stream."""
        check(driver.api().cuStreamSynchronize(self._stream), "cuStreamSynchronize")

    def __del__(self) -> None:
        try:
            driver.api().cuStreamDestroy(self._stream)
        except Exception:  # interpreter shutdown
            pass

    def __repr__(self) -> str:
        return f"cuopjit.Stream(device={self.device}, handle=0x{self.handle:x})"


def handle(stream: Any) -> int:
    """The raw CUstream handle of any stream-like object; TypeError names what is accepted."""
    if stream is None:
        return current()
    if isinstance(stream, int):
        return stream
    seen = _resolved.get(id(stream))
    if seen is None or seen[0] is not stream:   # an entry holds its object, so its id is not reused
        seen = (stream, _resolve(stream))
        if len(_resolved) >= _RESOLVED_KEPT:
            _resolved.clear()
        _resolved[id(stream)] = seen
    recent[0] = seen
    return seen[1]


def _resolve(stream: Any) -> int:
    if isinstance(stream, Stream):
        return stream.handle
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        value = proto() if callable(proto) else proto
        return int(value[1])
    for attr in ("cuda_stream", "ptr"):      # torch.cuda.Stream, cupy.cuda.Stream
        value = getattr(stream, attr, None)
        if isinstance(value, int):
            return value
    try:
        return int(stream)                   # cuda.bindings CUstream
    except (TypeError, ValueError):
        raise TypeError(f"stream={stream!r} is not a stream: pass a cuopjit.Stream, a torch or CuPy stream, "
                        "an object with __cuda_stream__, or a raw CUstream handle") from None


def synchronize(s: int) -> None:
    """Wait for everything queued on the stream with handle `s` (0: the legacy default stream)."""
    check(driver.api().cuStreamSynchronize(s), "cuStreamSynchronize")


def current() -> int:
    """The handle forwards use when given no stream: the innermost `with stream(...)`, else 0."""
    return local.stream


@contextlib.contextmanager
def use(stream: Any) -> Iterator[Any]:
    """`with cuopjit.stream(s):` makes s the current stream of this thread for forwards in the block."""
    previous = current()
    local.stream = handle(stream)
    try:
        yield stream
    finally:
        local.stream = previous


def capturing(s: int) -> bool:
    """True while stream `s` is being captured into a CUDA graph."""
    drv = driver.api()
    status = check(drv.cuStreamIsCapturing(s), "cuStreamIsCapturing")
    return status != drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE


def check_not_capturing(s: int, op: str) -> None:
    """A forward that must still compile or load a kernel cannot do so inside a capture: say what to do."""
    if local.relaxed_capture or s == 0:
        return
    if capturing(s):
        raise RuntimeError(f"{op}: this forward's kernels are not loaded yet, and loading them inside a CUDA "
                           "graph capture would break it: run the same forward once before capturing "
                           "(a warm-up call), then capture")


def set_relaxed_capture(on: bool) -> bool:
    """cuopjit.graph() captures in relaxed mode, where loading a kernel during capture is allowed; returns
    the previous value (for nested blocks to restore)."""
    previous, local.relaxed_capture = local.relaxed_capture, on
    return previous
