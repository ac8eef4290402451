"""`cuopjit tune` for GEMM and Conv2D: its arguments (one-line errors), every choice of a shape timed and stored
as a record (on a faked GPU, no compile), and on a GPU the records a second process plans from without timing
or compiling anything."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from cuopjit import tuning
from cuopjit.cli import tune
from cuopjit.cli.main import main
from cuopjit.config import JITConfig, RunSettings
from cuopjit.layout import CONTIGUOUS
from cuopjit.ops import FAMILIES
from cuopjit.recipes import placeholder
from cuopjit.target import named
from cuopjit.tensor import Tensor

SM90 = named("sm_90")


@pytest.mark.parametrize("argv, message", [
    (["tune", "gemm", "--shapes", "4096x4096"], "gemm: --shape takes M,N,K, got 4096,4096"),
    (["tune", "relu", "--shapes", "8x8x8"], "'relu' cannot be tuned from the command line: choose gemm, conv2d"),
    (["tune", "conv2d", "--shape", "32,64,56,56"], "conv2d: --shape takes N,C,H,W,K,R,S, got 32,64,56,56"),
    (["tune", "gemm", "--shape", "8x8x8", "--stride", "2"], "--stride applies to conv2d, not gemm: leave it out"),
    (["tune", "gemm", "--shape", "8x8x8", "--layout", "channels_last"],
     "--layout applies to conv2d, not gemm: leave it out"),
    (["tune", "conv2d", "--shape", "2,8,8,8,8,3,3", "--trans", "nt"], "--trans applies to gemm, not conv2d: leave it out"),
    (["tune", "conv2d", "--shape", "2,8,8,8,8,3,3", "--stride", "0"], "--stride 0 is not allowed: give an integer >= 1"),
    (["tune", "gemm", "--shape", "8x8x8", "--dtype", "float8"],
     "--dtype 'float8': choose from float32, float64, float16, bfloat16"),
])
def test_tune_command_checks_its_arguments(capsys, argv, message):
    assert main(argv) == 2
    assert capsys.readouterr().err == f"cuopjit tune: error: {message}\n"


@pytest.fixture
def fake_gpu(monkeypatch):
    """The tune command on sm_90 without a GPU: placeholder tensors, plans 'loaded' as themselves, and each
    choice timed as the length of its label (the shortest label wins, the first of equals)."""
    def fake_tensor(rng, shape, dtype, layout=CONTIGUOUS):
        p = placeholder(shape, dtype)
        return p if layout == CONTIGUOUS else Tensor._view(p.ptr, p.shape, p.dtype, p.device, None, layout)
    monkeypatch.setattr(tune, "random_tensor", fake_tensor)
    monkeypatch.setattr(tune.driver, "current_ordinal", lambda: 0)
    monkeypatch.setattr(tune.target, "of_device", lambda ordinal: SM90)
    monkeypatch.setattr(tuning.driver, "driver_version", lambda: "13.0")
    monkeypatch.setattr(tuning.driver, "current_ordinal", lambda: 0)
    monkeypatch.setattr(tuning.executor, "load", lambda plan, ordinal, settings: plan)
    monkeypatch.setattr(tuning, "_copy", lambda value: value)
    monkeypatch.setattr(tuning, "_time", lambda plan, pointers, stream, runs: float(len(plan.choice)))


@pytest.mark.parametrize("precision", ["tf32", "3xtf32"])
def test_tune_conv2d_times_every_choice_and_stores_a_record_each(tmp_path, capsys, fake_gpu, precision):
    assert main(["tune", "conv2d", "--shape", "32,256,56,56,512,1,1", "--stride", "2", "--tensor-core",
                 "--precision", precision, "--cache-dir", str(tmp_path)]) == 0
    op = FAMILIES["conv2d"][0](256, 512, 1, 1, 2, 2)
    x, y = placeholder((32, 256, 56, 56)), placeholder((32, 512, 28, 28))
    op.set_weight(placeholder(op.weight_shape))
    problem = op.problem(x, y)
    assert (problem.sh, problem.sw, problem.ph, problem.oh) == (2, 2, 0, 28)
    cfg = JITConfig()
    cfg.enable_tensor_core, cfg.precision = True, precision
    labels = list(dict.fromkeys(c.label for c in op.family.choices(problem, cfg.snapshot(), SM90)))
    assert len(labels) > 1
    settings = RunSettings.of(cfg.snapshot(), str(tmp_path), True, tuning=True)
    key = tuning.record_key("conv2d", problem, SM90, precision)
    assert tuning.timings(settings, key, labels) == {label: float(len(label)) for label in labels}
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"32x256x56x56x512x1x1 stride 2 contiguous: {min(labels, key=len)} "
                             f"({len(labels)} choices: ")
    assert out[1] == f"records stored in {tmp_path} (kind 'tuning'); `cuopjit cache export` carries them"


def test_tune_gemm_keeps_its_transposes(tmp_path, capsys, fake_gpu):
    assert main(["tune", "gemm", "--shape", "1000x768x512", "--trans", "nt", "--cache-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("1000x768x512 nt: ")


SECOND = """
    import json, numpy as np, cuopjit
    from cuopjit.build import pipeline
    from cuopjit import tuning
    tuning._time = lambda *a: (_ for _ in ()).throw(AssertionError("timed again"))
    compiled = []
    real = pipeline.compiler.compile_cubin
    pipeline.compiler.compile_cubin = lambda *a, **k: compiled.append(1) or real(*a, **k)
    cuopjit.get_default_global_jit_config().enable_auto_tuning = True
    {build}
    cfg = cuopjit.JITConfig(); cfg.enable_tensor_core = True
    jit.set_jit_config(cfg)
    jit.forward(*args)
    print(json.dumps({{"compiled": len(compiled), "choice": jit.get_performance_profile().plan_choice}}))
"""
GEMM = """g = cuopjit.GemmFloat()
    g.set_weight(cuopjit.tensor(np.ones((512, 512), np.float32)))
    jit = cuopjit.JITGemmFloat(g)
    args = (cuopjit.tensor(np.ones((512, 512), np.float32)), cuopjit.empty([512, 512]))"""
CONV = """c = cuopjit.Convolution2DFloat(64, 128, 3, 3, 2, 2, pad_h=1, pad_w=1)
    c.set_weight(cuopjit.tensor(np.ones((128, 64, 3, 3), np.float32)))
    jit = cuopjit.JITConvolution2DFloat(c)
    args = (cuopjit.tensor(np.ones((4, 64, 28, 28), np.float32)), cuopjit.empty([4, 128, 14, 14]))"""


@pytest.mark.gpu
@pytest.mark.parametrize("argv, label, build", [
    (["gemm", "--shapes", "512x512x512"], "512x512x512 nn:", GEMM),
    (["conv2d", "--shape", "4,64,28,28,128,3,3", "--stride", "2"], "4x64x28x28x128x3x3 stride 2 contiguous:", CONV)],
    ids=["gemm", "conv2d"])
def test_tune_records_are_used_by_a_second_process_without_timing(tmp_path, argv, label, build):
    """Process 1: `cuopjit tune`; process 2: auto-tuning on, the same shape: no trial, no compile."""
    env = {**os.environ, "CUOPJIT_CACHE_DIR": str(tmp_path)}
    tuned = subprocess.run([sys.executable, "-m", "cuopjit", "tune", *argv, "--tensor-core"], env=env,
                           capture_output=True, text=True, timeout=300)
    assert tuned.returncode == 0, tuned.stderr
    assert "choice" in tuned.stderr and label in tuned.stdout
    second = textwrap.dedent(SECOND.format(build=build))
    run = subprocess.run([sys.executable, "-c", second], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["compiled"] == 0 and got["choice"] == tuned.stdout.split(": ", 1)[1].split(" (")[0]
