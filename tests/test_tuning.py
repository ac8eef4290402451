"""Tuning records: one cache record per choice, keyed by problem bucket, precision and GPU identity; a new
choice is timed alone and never discards the others; `cuopjit tune` (GPU) stores records that a second
process uses without timing or compiling anything."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass

import pytest

from cuopjit import tuning
from cuopjit.cache import get_cache
from cuopjit.config import JITConfig, RunSettings
from cuopjit.ops.gemm import plans as gk
from cuopjit.target import named

from conftest import make_config


@dataclass(frozen=True)
class _Choice:
    label: str


class _Family:
    name = "fake"

    @staticmethod
    def plan(problem, choice, target):
        return choice.label


class _Op:
    family = _Family()

    @staticmethod
    def bind(*args, **kwargs):
        return None, (), None


@pytest.fixture
def fake_gpu(monkeypatch):
    """Timing without a GPU: each label's time comes from `times`; `timed` lists what was timed."""
    times, timed = {}, []
    monkeypatch.setattr(tuning.driver, "driver_version", lambda: "13.0")
    monkeypatch.setattr(tuning.driver, "current_ordinal", lambda: 0)
    monkeypatch.setattr(tuning.executor, "load", lambda plan, ordinal, settings: plan)
    monkeypatch.setattr(tuning, "_time", lambda run, pointers, stream: timed.append(run) or times[run])
    return times, timed


def test_one_record_per_choice_and_a_new_choice_keeps_the_old_ones(tmp_path, fake_gpu):
    times, timed = fake_gpu
    times.update({"a": 2.0, "b": 1.0, "c": 0.5})
    settings = RunSettings.of(JITConfig().snapshot(), str(tmp_path), True, tuning=True)
    problem, t = gk.packed("float32", 1000, 1000, 1000), named("sm_90")
    assert tuning.fastest(_Op(), problem, [_Choice("a"), _Choice("b")], settings, t, (), {}) == "b"
    assert timed == ["a", "b"]
    key = tuning.record_key("fake", problem, t)
    for label in ("a", "b"):
        record = get_cache(str(tmp_path)).load_record(tuning.KIND, tuning.choice_key(key, label))
        assert record["ms"] == times[label] and record["choice"] == label and record["problem"] == key
    # A new choice: only it is timed, and the old records stay and still count.
    progress = []
    plan = tuning.fastest(_Op(), problem, [_Choice("a"), _Choice("b"), _Choice("c")], settings, t, (), {},
                          progress=lambda done, total, label: progress.append((done, total, label)))
    assert plan == "c" and timed == ["a", "b", "c"] and progress == [(0, 1, "c"), (1, 1, "")]
    assert tuning.timings(settings, key, ["a", "b", "c"]) == times


def test_record_keys_name_bucket_precision_and_gpu(monkeypatch):
    monkeypatch.setattr(tuning.driver, "driver_version", lambda: "13.0")
    t = named("sm_90")
    key = tuning.record_key("gemm", gk.packed("float32", 1000, 1000, 1000), t, "3xtf32")
    assert key.startswith("gemm|dtype=float32,m=1024,n=1024,k=1024,trans_a=False,trans_b=False,aligned=True")
    assert key.endswith(f"|precision=3xtf32|{t.name}|{t.sm_count}|sm_90|13.0")
    assert key != tuning.record_key("gemm", gk.packed("float32", 1000, 1000, 1000), t, "tf32")
    assert tuning.record_key("gemm", gk.packed("float32", 1000, 1000, 1000), t) == \
        tuning.record_key("gemm", gk.packed("float32", 1020, 1000, 1000), t)


def test_tune_command_checks_its_arguments(capsys):
    from cuopjit.cli.main import main
    assert main(["tune", "gemm", "--shapes", "4096x4096"]) == 2
    assert "cuopjit tune: error: gemm: --shape takes M,N,K, got 4096,4096\n" == capsys.readouterr().err
    assert main(["tune", "relu", "--shapes", "8x8x8"]) == 2
    assert "'relu' cannot be tuned from the command line: choose gemm" in capsys.readouterr().err


@pytest.mark.gpu
def test_tune_records_are_used_by_a_second_process_without_timing(tmp_path):
    """Process 1: `cuopjit tune`; process 2: auto-tuning on, the same shape: no trial, no compile."""
    env = {**os.environ, "CUOPJIT_CACHE_DIR": str(tmp_path)}
    tune = subprocess.run([sys.executable, "-m", "cuopjit", "tune", "gemm", "--dtype", "float32", "--shapes",
                           "512x512x512", "--tensor-core"], env=env, capture_output=True, text=True, timeout=300)
    assert tune.returncode == 0, tune.stderr
    assert "choice" in tune.stderr and "512x512x512 nn:" in tune.stdout
    second = textwrap.dedent("""
        import json, numpy as np, cuopjit
        from cuopjit.build import pipeline
        from cuopjit import tuning
        tuning._time = lambda *a: (_ for _ in ()).throw(AssertionError("timed again"))
        compiled = []
        real = pipeline.compiler.compile_cubin
        pipeline.compiler.compile_cubin = lambda *a, **k: compiled.append(1) or real(*a, **k)
        cuopjit.get_default_global_jit_config().enable_auto_tuning = True
        g = cuopjit.GemmFloat()
        g.set_weight(cuopjit.tensor(np.ones((512, 512), np.float32)))
        jit = cuopjit.JITGemmFloat(g)
        cfg = cuopjit.JITConfig(); cfg.enable_tensor_core = True
        jit.set_jit_config(cfg)
        jit.forward(cuopjit.tensor(np.ones((512, 512), np.float32)), cuopjit.empty([512, 512]))
        print(json.dumps({"compiled": len(compiled), "choice": jit.get_performance_profile().plan_choice}))
    """)
    run = subprocess.run([sys.executable, "-c", second], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["compiled"] == 0 and got["choice"] == tune.stdout.split(": ", 1)[1].split(" (")[0]


def test_precision_reaches_the_snapshot_the_records_use():
    assert make_config(precision="3xtf32").snapshot().precision == "3xtf32"
