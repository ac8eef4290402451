"""cuopjit.torch.warm: a compiled graph's kernel launches from a learnt recipe (CPU: a stand-in operator;
torch CPU tensors stand for CUDA ones, their cuopjit views are the tensors themselves)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cuopjit.torch")

from cuopjit.config import DEFAULT  # noqa: E402
from cuopjit.torch import warm as warm_module  # noqa: E402
from cuopjit.torch.warm import Warm  # noqa: E402

WEIGHT = 0xBEEF00


class FakeOperator:
    """Plans per bind key; packs its operands' pointers around a held weight's; launches record pointers.
    `offset`: a plan that would pass a pointer derived from an operand's (its address plus some bytes)."""

    def __init__(self, offset: int = 0):
        self.plans: dict = {}
        self.forwards = 0
        self.launches: list = []
        self.offset = offset

    def memo(self, settings):
        return self.plans.setdefault(settings, {})

    def bind(self, *args, **kwargs):
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        key = tuple(tuple(t.shape) for t in tensors)
        pointers = [t.data_ptr() for t in tensors]
        pointers.insert(1, WEIGHT)
        pointers[0] += self.offset
        return key, tuple(pointers), None

    def forward(self, *args, stream=None, settings=DEFAULT, **kwargs):
        self.forwards += 1
        key, pointers, _ = self.bind(*args, **kwargs)
        self.memo(settings).setdefault(key, self._runner)(pointers, stream)

    def _runner(self, pointers, stream):
        self.launches.append((pointers, stream))


class Wrapper:
    """A JIT wrapper's surface: forward through the operator under its own settings."""
    run_settings = "wrapper settings"

    def __init__(self, op):
        self.op = op

    def forward(self, *args, stream=None, **kwargs):
        self.op.forward(*args, stream=stream, settings=self.run_settings, **kwargs)


@pytest.fixture(autouse=True)
def views_are_the_tensors(monkeypatch):
    monkeypatch.setattr(warm_module, "operands", lambda args, kwargs: (args, kwargs, {}))


def _calls(n, k=2):
    """n calls' operands, each at new addresses."""
    return [[torch.full((4,), float(i)) for _ in range(k)] for i in range(n)]


def _expected(x, y, r=None):
    return (x.data_ptr(), WEIGHT, y.data_ptr()) + (() if r is None else (r.data_ptr(),))


@pytest.mark.parametrize("wrapped", [False, True])
def test_a_recipe_proven_at_new_addresses_launches_without_forward(wrapped):
    op = FakeOperator()
    warm = Warm(Wrapper(op) if wrapped else op, op)
    calls = _calls(4)
    for x, y in calls:
        warm(7, (x, y), {})
    assert op.forwards == 2          # the first call proposes the recipe, the second proves it
    assert op.launches == [(_expected(x, y), 7) for x, y in calls]


def test_keyword_operands_follow_their_position():
    op = FakeOperator()
    warm = Warm(op, op)
    calls = _calls(3, 3)
    for x, y, r in calls:
        warm(1, (x, y), {"residual": r, "axis": 1})
    assert op.forwards == 2
    x, y, r = calls[-1]
    assert op.launches[-1] == (_expected(x, y, r), 1)


def test_the_same_addresses_prove_nothing():
    op = FakeOperator()
    warm = Warm(op, op)
    x, y = _calls(1)[0]
    for _ in range(3):
        warm(0, (x, y), {})
    assert op.forwards == 3 and not warm.trusted


def test_a_pointer_the_recipe_cannot_predict_keeps_the_forward_path():
    op = FakeOperator(offset=16)     # a derived pointer looks fixed once, and is disproved by the next call
    warm = Warm(op, op)
    calls = _calls(12)
    for x, y in calls:
        warm(0, (x, y), {})
    assert op.forwards == 12 and not warm.trusted
    assert op.launches[-1][0][0] == calls[-1][0].data_ptr() + 16


def test_operators_without_a_plan_memo_always_take_forward():
    op = FakeOperator()
    warm = Warm(op, op)
    warm.op = object()     # an operator of nobody's plan memo
    for x, y in _calls(3):
        warm(0, (x, y), {})
    assert op.forwards == 3 and warm.tries == warm_module._TRIES


class OwnRunner:
    """A runner of the backend's own (fused_attention.Runner's surface): `bound` says the launch it made."""

    def __init__(self, copies: bool = False):
        self.forwards, self.launches, self.copies = 0, [], copies
        self.launch = lambda pointers, stream: self.launches.append((pointers, stream))   # one object: a memo's runner

    def forward(self, *args, stream=None, **kwargs):
        self.forwards += 1
        self.launch(tuple(a.data_ptr() for a in args), stream)

    def bound(self, *args, **kwargs):
        return None if self.copies else (self.launch, tuple(a.data_ptr() for a in args))


@pytest.mark.parametrize("copies", [False, True])
def test_a_runner_that_says_its_launch_is_trusted_unless_it_copies(copies):
    runner = OwnRunner(copies)
    warm = Warm(runner, object())
    calls = _calls(4, 3)
    for q, k, v in calls:
        warm(5, (q, k, v), {"scale": 0.5})
    assert runner.forwards == (4 if copies else 2) and warm.trusted is not copies
    assert runner.launches == [(tuple(t.data_ptr() for t in c), 5) for c in calls]
