"""Benchmark scripts on a machine without a GPU: recorded GPU results are never replaced; the layer benchmark's
layer lists (ResNet-50 through hooks where torch is importable, its architecture formula everywhere, BERT-base)
and its plans, which prewarm's machinery builds without a GPU."""
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
               "mb_expr.py", "layers.py"]


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
    assert f"{other}: no chart for this file (gemm*.json, conv2d*.json, memory_bound*.json, layers*.json)" in out.stderr


@pytest.fixture
def layers(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("layer_cases")


@pytest.mark.parametrize("batch", [32, 1])
def test_resnet50_has_23_distinct_convs_and_its_classifier(layers, batch):
    found = layers.resnet50_formula(batch)
    convs = [x for x in found if x.kind == "conv"]
    assert len(convs) == 23 and sum(x.count for x in convs) == 53
    assert len([x for x in convs if x.dims[5] == 1]) == 15
    assert [x.dims for x in found if x.kind == "linear"] == [(batch, 1000, 2048)]
    names = {x.name: x.count for x in convs}
    assert names[f"7x7/2 3->64 224² b{batch}"] == 1 and names[f"3x3 256->256 14² b{batch}"] == 5
    assert names[f"1x1 512->128 28² b{batch}"] == 3 and names[f"1x1 1024->256 14² b{batch}"] == 5
    assert names[f"1x1/2 1024->2048 14² b{batch}"] == 1 and names[f"3x3 512->512 7² b{batch}"] == 2
    assert all(x.batch == batch and x.net == "resnet50" for x in found)


def test_hooks_find_each_distinct_conv_and_linear_once_with_its_count(layers):
    """The hook enumeration on the meta device (no weights are ever materialised)."""
    torch = pytest.importorskip("torch")
    nn = torch.nn
    with torch.device("meta"):
        model = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.Conv2d(8, 8, 1), nn.Conv2d(8, 8, 1), nn.ReLU(),
                              nn.Conv2d(8, 16, 3, 1, 1, groups=8, bias=False), nn.Flatten(1), nn.Linear(16 * 64, 10))
    found = layers.hooked_layers(model, torch.empty(2, 3, 16, 16, device="meta"), "toy")
    assert [(x.kind, x.dims, x.count) for x in found] == [
        ("conv", (2, 3, 16, 16, 8, 3, 3, 2, 1, 1), 1), ("conv", (2, 8, 8, 8, 8, 1, 1, 1, 0, 1), 2),
        ("conv", (2, 8, 8, 8, 16, 3, 3, 1, 1, 8), 1), ("linear", (2, 10, 1024), 1)]
    for m in model.modules():
        assert not m._forward_hooks


@pytest.mark.parametrize("batch", [32, 1])
def test_torchvision_resnet50_hooks_match_the_formula(layers, batch):
    """Where torchvision imports (the GPU machines), its model's layers are the formula's, in the same order."""
    pytest.importorskip("torch")
    try:
        importlib.import_module("torchvision")
    except Exception as exc:   # a CUDA torchvision beside a CPU torch fails to load its extension
        pytest.skip(f"torchvision not importable: {type(exc).__name__}")
    found, source = layers.resnet50_layers(batch)
    assert source.startswith("torchvision") and found == layers.resnet50_formula(batch)


def test_bert_layer_is_four_linears_and_two_attention_products(layers):
    found = layers.bert_layers()
    assert [(x.kind, x.dims, x.trans_b) for x in found] == [
        ("linear", (4096, 2304, 768), False), ("linear", (4096, 768, 768), False),
        ("linear", (4096, 3072, 768), False), ("linear", (4096, 768, 3072), False),
        ("bmm", (96, 512, 512, 64), True), ("bmm", (96, 512, 64, 512), False)]
    ops = layers.operands(found[4], layers.CONTIGUOUS, layers.TRANSPOSED)
    assert ops["b"] == ((96, 64, 512), layers.TRANSPOSED) and ops["a"] == ((96, 512, 64), layers.CONTIGUOUS)
    assert layers.operands(found[0], layers.CONTIGUOUS, layers.TRANSPOSED)["w"] == ((2304, 768), layers.CONTIGUOUS)


def test_prewarm_builds_every_cubin_the_layer_plans_need(layers, monkeypatch):
    """The plans of every layer and precision for sm_90 (placeholders, no GPU) are what the benchmark builds with
    prewarm's machinery before timing: each cubin once, none missing."""
    from cuopjit import prewarm
    found, _ = layers.all_layers()
    lay = layers.layouts()
    cases = layers.cases(found, list(layers.PRECISIONS), layers.fake_tensors(lay))
    assert len(cases) == 3 * (2 * 24 + 6)
    planned = layers.planned(cases, "sm_90")
    needed = {prewarm.module_key(spec, "sm_90") for p in planned for spec in p.plan.specs}
    assert all(p.plan.launches for p in planned) and all(p.target.arch == "sm_90" for p in planned)
    bench = importlib.import_module("layers")
    built = []
    monkeypatch.setattr(bench.pipeline, "build", lambda spec, arch: built.append(prewarm.module_key(spec, arch)))
    assert bench.build(planned, jobs=2) == len(built) == len(set(built))
    assert set(built) == needed
    conv = [p for c, p in zip(cases, planned) if c.layer.kind == "conv" and c.precision == "tf32"]
    assert any("wgmma" in p.plan.choice for p in conv)


def test_layer_listing_runs_without_a_gpu(tmp_path):
    out = subprocess.run([sys.executable, str(BENCHMARKS / "layers.py"), "--list", "sm_90", "--only", "bert",
                          "--precisions", "tf32"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 7 and lines[0].startswith("QKV 4096x2304x768") and "wgmma" in lines[0]
    assert lines[-1].endswith("kt transposed") and " cubins for sm_90; layouts: conv " in lines[-1]


def test_layer_summary_is_the_goal_table(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    bench = importlib.import_module("layers")
    rows = [{"net": "resnet50", "kind": "conv", "batch": 32, "precision": "tf32", "ratio": r, "count": n,
             "torch_ms": r * ms, "cuopjit_ms": ms} for r, n, ms in ((0.5, 1, 1.0), (2.0, 3, 1.0))]
    rows.append({**rows[0], "kind": "linear", "ratio": 9.0})
    got = {g["stat"]: g for g in bench.summary(rows)}
    assert set(got) == {"geomean", "min"} and got["geomean"]["layers"] == 2
    assert got["geomean"]["value"] == pytest.approx(1.0) and got["geomean"]["met"] is False
    assert got["min"]["value"] == 0.5 and got["min"]["goal"] == 0.90
    assert got["geomean"]["weighted"] == pytest.approx((0.5 + 3 * 2.0) / 4)
