"""GlobalJITConfig.enable_debug's launch check: every launch of a plan waits for its stream and names the culprit.

`executor.load` wraps a runner with `checked` only while debug is on (the normal warm path is not
touched). After each launch the stream is synchronised; a failure (an illegal address, a trap)
raises ExecutionError naming the operator, the kernel and the template it came from. Inside a
CUDA graph capture nothing is synchronised (the launches are only recorded then).
"""
from __future__ import annotations

import sys
from typing import Callable

from . import driver, memory
from .errors import ExecutionError


def _operator_name() -> str:
    """The operator (or JIT wrapper and operator) whose forward is on the stack (read only after a failure)."""
    from .ops.base import Operator
    frame, found = sys._getframe(2), "an operator"
    while frame is not None:
        candidate = frame.f_locals.get("self")
        wrapped = getattr(candidate, "operator", None)
        if isinstance(wrapped, Operator):
            return f"{type(candidate).__name__}({type(wrapped).__name__})"
        if isinstance(candidate, Operator):
            found = type(candidate).__name__    # keep looking: a JIT wrapper may be further up
        frame = frame.f_back
    return found


def _capturing(stream: int) -> bool:
    drv = driver._driver()
    err, status = drv.cuStreamIsCapturing(stream)
    return int(err) != 0 or status != drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE


def checked(run: Callable[[tuple, int], None], runner) -> Callable[[tuple, int], None]:
    """`run` launch by launch, each followed by a synchronous check of its stream; a failure names the operator
    and the kernel. `run` itself is what runs inside a graph capture (nothing may synchronise there)."""
    workspace, ordinal = runner.plan.workspace, runner.ordinal

    def check(stream: int, launch) -> None:
        err, = driver._driver().cuStreamSynchronize(stream)
        if int(err) != 0:
            name = getattr(err, "name", str(err))
            raise ExecutionError(f"{_operator_name()} failed on device {ordinal} in kernel {launch.kl.spec.name} "
                                 f"(template {launch.kl.spec.template}, plan {runner.plan.choice or 'default'}): "
                                 f"{name}. The CUDA context is unusable after this error: restart the process", name)

    def run_checked(pointers: tuple, stream: int) -> None:
        if _capturing(stream):
            run(pointers, stream)
            return
        ws = memory.allocate(workspace, ordinal, stream) if workspace else 0
        try:
            for launch in runner.launches:
                launch((*pointers, ws) if workspace else pointers, stream)
                check(stream, launch)
        finally:
            if workspace:
                memory.release(ws, workspace, ordinal, stream)

    run_checked.runner = runner
    return run_checked
