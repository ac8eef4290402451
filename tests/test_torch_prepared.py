"""Prepared launches of torch.ops.cuopjit (cuopjit/torch/prepared.py): a warm call launches the plan its first
call loaded, with this call's pointers, and anything that could change the plan or the fixed pointers misses.

CPU: the ops' CUDA implementations run on CPU tensors that say they are on device 0, planning for sm_90 and
launching into a recorder (no driver). GPU: prepared calls against the slow path's results."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
ct = pytest.importorskip("cuopjit.torch")

from cuopjit.device import streams  # noqa: E402
from cuopjit.ops.gemm.operator import Gemm  # noqa: E402
from cuopjit.run import executor  # noqa: E402
from cuopjit.target import named  # noqa: E402
from cuopjit.torch import common, library, prepared  # noqa: E402
import cuopjit.ops.base as base  # noqa: E402


class Recorder:
    """Stands in for the loaded plans: each launch's (plan choice, pointers, stream); `loads` counts plans loaded."""

    def __init__(self):
        self.launches, self.loads = [], 0

    def load(self, plan, ordinal, settings, name=""):
        self.loads += 1

        def run(pointers, stream):
            self.launches.append((plan.choice, tuple(pointers), stream))
        return run


@pytest.fixture
def fake_gpu(monkeypatch):
    """CPU tensors as device-0 CUDA tensors for cuopjit.torch's launches; fresh operator and prepared tables."""
    rec = Recorder()
    monkeypatch.setattr(torch.Tensor, "get_device", lambda self: 0)
    monkeypatch.setattr(executor, "load", rec.load)
    monkeypatch.setattr(base.targets, "of_device", lambda ordinal: named("sm_90"))
    monkeypatch.setattr(streams, "check_not_capturing", lambda s, op: None)
    monkeypatch.setattr(library, "raw_stream", lambda ordinal: 7)
    monkeypatch.setattr(prepared, "raw_stream", lambda ordinal: 7)
    monkeypatch.setattr(common, "_instances", {})
    monkeypatch.setattr(common, "_held", {})
    impls = {name: library._impl(name, op) for name, op in library.OPS.items()}
    return rec, impls


def tables(impl):
    return impl.table


def test_a_warm_call_launches_the_same_plan_with_its_own_pointers(fake_gpu):
    rec, impls = fake_gpu
    relu = impls["relu"]
    x1, x2 = torch.randn(33, 5), torch.randn(33, 5)
    y1 = relu(x1)
    assert len(tables(relu).calls) == 1 and rec.loads == 1
    assert next(iter(tables(relu).calls.values())).operator is common.instance("relu", torch.float32)
    y2 = relu(x2)
    assert rec.loads == 1 and len(rec.launches) == 2
    (c1, p1, s1), (c2, p2, s2) = rec.launches
    assert c1 == c2 and s1 == s2 == 7
    assert p1 == (x1.data_ptr(), y1.data_ptr()) and p2 == (x2.data_ptr(), y2.data_ptr())
    assert y2.shape == x2.shape and y2.dtype == x2.dtype and y2.is_contiguous()


@pytest.mark.parametrize("other, loads, prepared_calls", [
    (lambda: torch.randn(2, 3, 4, 6), 2, 2),                                          # shape
    (lambda: torch.randn(2, 3, 4, 5, dtype=torch.float64), 2, 2),                     # dtype
    (lambda: torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last), 1, 1),   # layout
    (lambda: torch.randn(5, 4, 3, 2).permute(3, 2, 1, 0), 1, 1),                      # strides
], ids=["shape", "dtype", "layout", "strides"])
def test_shapes_dtypes_layouts_and_strides_are_keys(fake_gpu, other, loads, prepared_calls):
    """Another layout or strides misses and runs on a contiguous copy (the same plan), never prepared."""
    rec, impls = fake_gpu
    relu = impls["relu"]
    relu(torch.randn(2, 3, 4, 5))
    y = other()
    assert tables(relu).get((y,)) is None
    out = relu(y)
    assert rec.loads == loads and len(tables(relu).calls) == prepared_calls
    assert rec.launches[-1][1][1] == out.data_ptr()


def test_devices_are_keys(fake_gpu, monkeypatch):
    rec, impls = fake_gpu
    x = torch.randn(8)
    impls["relu"](x)
    key = tables(impls["relu"]).key((x,))
    monkeypatch.setattr(torch.Tensor, "get_device", lambda self: 1)
    assert tables(impls["relu"]).key((x,)) != key


def test_windows_and_numbers_are_keys(fake_gpu):
    rec, impls = fake_gpu
    pool = impls["max_pool2d"]
    x = torch.randn(2, 3, 16, 16)
    pool(x, [2, 2])
    assert tables(pool).get((x, [2, 2])) is not None and tables(pool).get((x, [3, 3])) is None
    pool(x, [3, 3], [2, 2])
    assert len(tables(pool).calls) == 2 and rec.loads == 2


def test_a_gemm_weight_goes_per_call_as_it_lies(fake_gpu, monkeypatch):
    """GEMM-family operators read a held weight where it lies: another weight of the same shape (an activation
    as gemv's matrix, say) is the same prepared call with its own pointer; nothing is set or planned again."""
    rec, impls = fake_gpu
    sets = []
    original = Gemm.set_weight
    monkeypatch.setattr(Gemm, "set_weight", lambda self, w: sets.append(w.data_ptr()) or original(self, w))
    x, w1, w2 = torch.randn(9, 64), torch.randn(40, 64), torch.randn(40, 64)
    impls["linear"](x, w1)
    impls["linear"](x, w2)
    impls["linear"](x, w1)
    assert sets == [w1.data_ptr()] and rec.loads == 1
    assert [launch[1][1] for launch in rec.launches] == [w1.data_ptr(), w2.data_ptr(), w1.data_ptr()]


def test_a_packed_weight_is_keyed_by_identity_and_version():
    key = prepared.key_of(frozenset({1}))
    x, w = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3)
    first = key((x, w, None, [1, 1]))
    assert key((torch.randn(1, 3, 8, 8), w, None, [1, 1])) == first          # activations: by shape only
    assert key((x, w.clone(), None, [1, 1])) != first                        # another weight tensor
    w.mul_(2)
    assert key((x, w, None, [1, 1])) != first                                # the same tensor written in place


def test_alignment_is_a_key(fake_gpu):
    """Plans read a tensor's 16-byte alignment (vector loads): a view at an odd offset misses."""
    rec, impls = fake_gpu
    base = torch.randn(65)
    impls["relu"](base[:64])
    impls["relu"](base[1:])
    assert rec.loads == 2 and len(impls["relu"].table.calls) == 2


def test_a_linear_bias_goes_per_call(fake_gpu):
    rec, impls = fake_gpu
    linear = impls["linear"]
    x, w, b1, b2 = torch.randn(9, 64), torch.randn(40, 64), torch.randn(40), torch.randn(40)
    y1 = linear(x, w, b1)
    y2 = linear(x, w, b2)
    assert rec.loads == 1
    assert b1.data_ptr() in rec.launches[0][1] and b2.data_ptr() in rec.launches[1][1]
    assert y1.data_ptr() in rec.launches[0][1] and y2.data_ptr() in rec.launches[1][1]


def test_aliased_operands_are_not_prepared(fake_gpu):
    rec, impls = fake_gpu
    bmm = impls["bmm"]
    a = torch.randn(4, 9, 9)
    bmm(a, a)
    assert not tables(bmm).calls
    bmm(a, torch.randn(4, 9, 9))
    assert len(tables(bmm).calls) == 1


def test_errors_stay_one_line_naming_the_operand(fake_gpu):
    rec, impls = fake_gpu
    linear = impls["linear"]
    x, w = torch.randn(9, 64), torch.randn(40, 64)
    linear(x, w)
    with pytest.raises(ValueError, match=r"^GemmFloat: .*weight") as info:
        linear(x, torch.randn(40, 63))
    assert "\n" not in str(info.value)
    with pytest.raises(TypeError, match="cuopjit::relu: x is torch.int32, which is not supported"):
        impls["relu"](torch.ones(3, dtype=torch.int32))


@pytest.mark.gpu
def test_prepared_calls_equal_first_calls_on_the_gpu():
    ops = torch.ops.cuopjit
    cases = [(ops.relu, lambda: (torch.randn(1000, device="cuda"),)),
             (ops.softmax, lambda: (torch.randn(7, 33, device="cuda"), 1)),
             (ops.linear, lambda: (torch.randn(9, 64, device="cuda"), W, B)),
             (ops.conv2d, lambda: (torch.randn(1, 8, 16, 16, device="cuda"), CW, CB, [1, 1], [1, 1])),
             (ops.layer_norm, lambda: (torch.randn(5, 64, device="cuda"), [64], B64, B64))]
    W, B = torch.randn(40, 64, device="cuda"), torch.randn(40, device="cuda")
    CW, CB, B64 = torch.randn(8, 8, 3, 3, device="cuda"), torch.randn(8, device="cuda"), torch.randn(64, device="cuda")
    for op, make in cases:
        first = make()
        ref = op(*first).clone()
        for _ in range(3):
            again = make()
            got = op(*again)
            want = op(*(a.clone() if isinstance(a, torch.Tensor) else a for a in again))
            torch.testing.assert_close(got, want)
        torch.testing.assert_close(op(*first), ref)
