"""The warm forward's memo key: a tensor's plan_key, and what a memo hit may and may not reuse (no GPU).

Tensors are views of made-up addresses (nothing allocated); the memo is filled with a recording
runner, so these check the forward path itself: a hit launches with the call's pointers and stream,
and anything that changes the plan (shape, dtype, device, alignment, a released tensor) misses.
"""
from __future__ import annotations

import numpy as np
import pytest

import cuopjit
from cuopjit.device import streams
from cuopjit.config import DEFAULT
from cuopjit.tensor import Tensor


def view(shape, dtype="float32", *, device: int = 0, ptr: int = 1 << 20) -> Tensor:
    return Tensor._view(ptr, tuple(shape), np.dtype(dtype), device, None)


def test_plan_key_is_shared_exactly_when_the_plan_would_be():
    base = view([4, 8]).plan_key
    assert view([4, 8], ptr=(1 << 20) + 4096).plan_key == base      # another address, same alignment
    others = [view([8, 4]), view([4, 8], "float64"), view([4, 8], device=1), view([4, 8], ptr=(1 << 20) + 4)]
    keys = {t.plan_key for t in others}
    assert base not in keys and len(keys) == len(others)


def test_a_released_tensor_matches_no_plan():
    t, u = view([4, 8]), view([4, 8])
    live = t.plan_key
    t.release()
    u.release()
    assert t.plan_key not in (live, u.plan_key) and t.ptr == 0


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, pointers, stream):
        self.calls.append((pointers, stream))


def test_a_memo_hit_launches_with_the_calls_pointers_and_stream():
    op = cuopjit.ReluFloat()
    x, y = view([7]), view([7], ptr=2 << 20)
    run = Recorder()
    key, _, _ = op.bind(x, y)
    op.memo(DEFAULT)[key] = run
    x2, y2 = view([7], ptr=3 << 20), view([7], ptr=4 << 20)       # other tensors of the same kind: same plan
    assert op.forward(x2, y2) is y2
    assert op.forward(x, y, stream=42) is y

    class Foreign:                                                 # a stream object of another library
        def __cuda_stream__(self):
            return (0, 77)
    f = Foreign()
    op.forward(x, y, stream=f)
    op.forward(x, y, stream=f)                                     # resolved once, then one identity check
    with cuopjit.stream(99):
        op.forward(x, y)
    assert run.calls == [((3 << 20, 4 << 20), 0), ((1 << 20, 2 << 20), 42), ((1 << 20, 2 << 20), 77),
                         ((1 << 20, 2 << 20), 77), ((1 << 20, 2 << 20), 99)]
    assert streams.recent[0] == (f, 77)


def test_a_released_operand_misses_the_memo_and_raises():
    op = cuopjit.ReluFloat()
    x, y = view([7]), view([7], ptr=2 << 20)
    run = Recorder()
    op.memo(DEFAULT)[op.bind(x, y)[0]] = run
    x.release()
    with pytest.raises(ValueError, match="was released"):
        op.forward(x, y)
    assert run.calls == []
