"""Benchmark scripts on a machine without a GPU: recorded GPU results are never replaced."""
from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import cuopjit

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
GPU_SCRIPTS = ["gemm.py", "launch.py", "memory_bound.py", "mb_norms.py", "mb_sweep.py", "blas.py", "conv2d.py", "fusion.py",
               "mb_expr.py"]


@pytest.fixture
def results_io(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("results_io")


def test_a_run_without_gpu_writes_beside_recorded_gpu_results(results_io, tmp_path, capsys):
    recorded = tmp_path / "cache.json"
    recorded.write_text(json.dumps({"gpu": True, "disk_hit_ms": 0.11}))
    target = results_io.save_json(recorded, {"disk_hit_ms": 0.5}, gpu=False)
    assert target == tmp_path / "cache.no-gpu.json"
    assert json.loads(recorded.read_text()) == {"gpu": True, "disk_hit_ms": 0.11}
    assert json.loads(target.read_text()) == {"disk_hit_ms": 0.5, "gpu": False}
    assert f"no GPU here: {recorded} keeps its recorded GPU results; this run goes to {target}" in \
        capsys.readouterr().out


@pytest.mark.parametrize("recorded, gpu", [({"gpu": False}, False), ({"device": "H100"}, True), (None, False)])
def test_results_are_replaced_by_a_run_of_the_same_kind(results_io, tmp_path, recorded, gpu):
    path = tmp_path / "r.json"
    if recorded is not None:
        path.write_text(json.dumps(recorded))
    assert results_io.save_json(path, {"x": 1}, gpu=gpu) == path
    assert json.loads(path.read_text()) == {"x": 1, "gpu": gpu}


def test_cache_benchmark_without_gpu_keeps_the_recorded_results(results_io, tmp_path, monkeypatch):
    """benchmarks/cache.py end to end, on one template and one fresh process (the full run takes minutes)."""
    if cuopjit.get_device_count():
        pytest.skip("this machine has a GPU: the benchmark would record GPU results")
    bench = importlib.import_module("cache")
    from cuopjit.prewarm import representative_plans
    spec = representative_plans(["relu"], ["float32"])[0].plan.specs[0]
    monkeypatch.setattr(bench, "_specs_by_template", lambda: {spec.template: [spec]})
    monkeypatch.setattr(bench.codegen, "template_names", lambda: [spec.template])
    recorded = tmp_path / "cache.json"
    recorded.write_text(json.dumps({"gpu": True, "first_gemm_ms": [27.5]}))
    assert bench.main(["--processes", "1", "--out", str(recorded)]) == 0
    assert json.loads(recorded.read_text()) == {"gpu": True, "first_gemm_ms": [27.5]}
    written = json.loads((tmp_path / "cache.no-gpu.json").read_text())
    assert written["gpu"] is False and list(written["compile_ms"]) == [spec.template]


@pytest.mark.parametrize("script", GPU_SCRIPTS)
def test_gpu_benchmarks_refuse_to_run_without_a_gpu(script, tmp_path):
    if cuopjit.get_device_count():
        pytest.skip("this machine has a GPU")
    out = subprocess.run([sys.executable, str(BENCHMARKS / script)], capture_output=True, text=True, cwd=tmp_path,
                         timeout=120)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.startswith(f"benchmarks/{script} times kernels on an NVIDIA GPU and none was found; nothing "
                                 "was measured or written")


def test_charts_draw_the_scripts_chart_from_recorded_json(tmp_path):
    """charts.py re-draws a result file's PNG with its script's own chart; other files are refused by name."""
    pytest.importorskip("matplotlib")
    rows = [{"dtype": "float32", "kernel": "simt", "m": 64, "n": 64, "k": 64, "cuopjit_tflops": 1.0,
             "torch_tflops": 2.0, "torch_tf32": False}]
    result = tmp_path / "gemm_x.json"
    result.write_text(json.dumps({"rows": rows, "gpu": True}))
    subprocess.run([sys.executable, str(BENCHMARKS / "charts.py"), str(result)], check=True, capture_output=True,
                   timeout=120)
    assert (tmp_path / "gemm_x.png").read_bytes().startswith(b"\x89PNG")


def test_charts_name_the_files_they_can_draw(tmp_path):
    other = tmp_path / "cache.json"
    other.write_text("{}")
    out = subprocess.run([sys.executable, str(BENCHMARKS / "charts.py"), str(other)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 1
    assert f"{other}: no chart for this file (gemm*.json, conv2d*.json, memory_bound*.json)" in out.stderr
