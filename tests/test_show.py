"""`cuopjit.show(op, *args)` and `JITWrapper.get_kernel_source(*args)`: the CUDA C, PTX or SASS of every launch
of the plan a forward would run, under `cuopjit show`'s header; planned without a GPU from arrays or shapes."""
from __future__ import annotations

import re
import sys

import numpy as np
import pytest

import cuopjit
from cuopjit import listing, target
from cuopjit.build import disasm
from cuopjit.cli.main import main
from cuopjit.config import DEFAULT
from cuopjit.errors import CuopjitError
from cuopjit.listing import placeholder
from cuopjit.recipes import build, fake_maker

from conftest import make_config

HEADER = re.compile(r"// \S+: .*; grid \(\d+, \d+, \d+\), block \(\d+, \d+, \d+\), \d+ B dynamic shared memory")


def headers(text: str) -> list[str]:
    return [line for line in text.splitlines() if HEADER.fullmatch(line)]


def expected(op, args, kwargs=None, arch="sm_80") -> list[str]:
    """The headers of the plan `op.forward(*args)` would run on `arch`, from the plan itself."""
    plan = op.plan(*args, target=target.named(arch), **(kwargs or {}))
    return [f"// {kl.spec.name}: {kl.units}; grid {kl.grid}, block {kl.block}, {kl.shared} B dynamic shared memory"
            for kl in plan.launches]


def test_shapes_and_arrays_plan_like_tensors():
    op = cuopjit.SoftmaxFloat()
    want = expected(op, (placeholder((7, 1001)), placeholder((7, 1001))))
    by_shape = cuopjit.show(op, (7, 1001), (7, 1001), arch="sm_80")
    x = np.zeros((7, 1001), np.float32)
    by_array = cuopjit.show(op, x, np.empty_like(x), arch="sm_80")
    assert headers(by_shape) == headers(by_array) == want and by_shape == by_array
    assert 'extern "C" __global__' in by_shape and "#line" in by_shape


def test_keyword_arguments_reach_the_plan():
    """axis=0 of a [16, 256, 3, 256] input is the strided kernel; the last axis is the row kernel."""
    op = cuopjit.SoftmaxFloat()
    x = np.zeros((16, 256, 3, 256), np.float32)
    over_0 = headers(cuopjit.show(op, x, x, axis=0, arch="sm_90"))
    assert over_0 == expected(op, (placeholder(x.shape), placeholder(x.shape)), {"axis": 0}, "sm_90")
    assert over_0 != headers(cuopjit.show(op, x, x, arch="sm_90"))


def test_the_same_array_twice_is_one_placeholder_shapes_are_not():
    a = np.zeros((4, 4), np.float64)
    (p, q, r), kwargs, real = listing.placeholders((a, a, (4, 4)), {"out": a}, np.dtype(np.float32))
    assert p is q is kwargs["out"] and r is not p and not real
    assert (p.dtype, r.dtype, r.shape) == (np.float64, np.float32, (4, 4)) and p.ptr % 256 == r.ptr % 256 == 0


def test_the_text_is_what_the_cli_prints(capsys):
    op, args, kwargs = build("conv2d", "float32", (2, 3, 17, 19, 8, 3, 5), fake_maker(np.float32))
    text = cuopjit.show(op, *args, arch="sm_80", **kwargs)
    assert main(["show", "conv2d", "--shape", "2,3,17,19,8,3,5", "--arch", "sm_80"]) == 0
    assert capsys.readouterr().out == text and len(headers(text)) == 2


def test_each_module_is_printed_once():
    """dot's two launches are two entry points of one module: the second names the first's source."""
    text = cuopjit.show(cuopjit.DotDouble(), (4097,), (4097,), (1,), arch="sm_80")
    assert len(headers(text)) == 2 and text.count("dot_final(const scalar_t") == 1
    assert "// (source as above: entry point dot_final of the same module)" in text


def test_ptx_and_the_kinds_of_text():
    op = cuopjit.ReluDouble()
    ptx = cuopjit.show(op, (1000,), (1000,), arch="sm_80", what="ptx")
    assert headers(ptx) == expected(op, (placeholder((1000,), np.float64), placeholder((1000,), np.float64)))
    assert ".target sm_80" in ptx and 'extern "C"' not in ptx
    with pytest.raises(ValueError, match=r"^what='asm' is not one of 'cuda', 'ptx', 'sass'$"):
        cuopjit.show(op, (1000,), (1000,), what="asm")


def test_sass_without_a_disassembler_raises_the_note(monkeypatch):
    monkeypatch.setattr(disasm, "sass_tool", lambda: None)
    with pytest.raises(CuopjitError, match=f"^{re.escape(disasm.NO_SASS)}$"):
        cuopjit.show(cuopjit.ReluFloat(), (1000,), (1000,), what="sass")


def test_sass_disassembles_each_kernel(monkeypatch):
    tool = [sys.executable, "-c", "import sys; print('SASS', open(sys.argv[1], 'rb').read(4))"]
    monkeypatch.setattr(disasm, "sass_tool", lambda: tool)
    text = cuopjit.show(cuopjit.ReluFloat(), (1000,), (1000,), arch="sm_80", what="sass")
    assert text.splitlines()[0].startswith("// relu_f32") and "SASS b'\\x7fELF'" in text


def test_a_jit_wrapper_shows_the_kernels_of_its_own_config():
    gemm = cuopjit.GemmFloat()
    gemm.set_weight(placeholder((1000, 65)))
    jit = cuopjit.JITGemmFloat(gemm)
    jit.set_jit_config(make_config(tile_size=64))
    text = jit.get_kernel_source((33, 1000), (33, 65), arch="sm_80")
    assert cuopjit.show(jit, (33, 1000), (33, 65), arch="sm_80") == text
    assert all("t64x64" in h for h in headers(text)) and headers(text)
    assert not any("t64x64" in h for h in headers(cuopjit.show(gemm, (33, 1000), (33, 65), arch="sm_80")))


def test_arguments_are_checked_as_forward_checks_them():
    gemm = cuopjit.GemmFloat()
    with pytest.raises(ValueError, match=r"GemmFloat: no weight"):
        cuopjit.show(gemm, (4, 4), (4, 4))
    with pytest.raises(TypeError, match=r"SoftmaxFloat: x is float64, SoftmaxFloat works on float32"):
        cuopjit.show(cuopjit.SoftmaxFloat(), np.zeros((4, 4)), (4, 4))
    with pytest.raises(TypeError, match=r"^show takes a cuopjit operator or JIT wrapper, got int$"):
        cuopjit.show(3, (4, 4))


def test_an_empty_output_launches_nothing():
    assert cuopjit.show(cuopjit.ReluFloat(), (0,), (0,)) == "// nothing to launch: the output is empty\n"


def test_without_a_gpu_the_default_target_is_sm90():
    if cuopjit.get_device_count():
        pytest.skip("this machine has a GPU: show plans for it")
    op = cuopjit.LayerNormFloat()
    op.set_gamma(placeholder((1001,)))
    op.set_beta(placeholder((1001,)))
    assert headers(cuopjit.show(op, (7, 1001), (7, 1001))) == expected(
        op, (placeholder((7, 1001)), placeholder((7, 1001))), arch="sm_90")


# --- GPU ---------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_on_the_gpu_show_prints_the_plan_forward_ran():
    from cuopjit.run import executor
    x, y = cuopjit.random((333, 1001), seed=1), cuopjit.empty((333, 1001))
    op = cuopjit.SoftmaxFloat()
    op.forward(x, y)
    plan = executor.runner_of(next(iter(op.memo(DEFAULT).values()))).plan
    arch = target.of_device(cuopjit.get_device()).arch   # get_device(): the current ordinal
    want = [listing.header(r) for r in listing.rows(plan.launches, arch, ())]
    assert headers(cuopjit.show(op, x, y)) == want
    assert headers(cuopjit.show(op, (333, 1001), (333, 1001))) == want   # placeholders plan for the GPU too


@pytest.mark.gpu
def test_on_the_gpu_a_wrapper_shows_what_its_forward_ran():
    a, b, c = cuopjit.random((257, 129), seed=2), cuopjit.random((129, 65), seed=3), cuopjit.empty((257, 65))
    gemm = cuopjit.GemmFloat()
    gemm.set_weight(b)
    jit = cuopjit.JITGemmFloat(gemm)
    jit.set_jit_config(make_config(tile_size=64))
    jit.forward(a, c)
    names = [h.split(":")[0][3:] for h in headers(jit.get_kernel_source(a, c))]
    assert " + ".join(names) == jit.get_performance_profile().kernel_name and "t64x64" in names[0]
