"""`cuopjit show --ptx/--sass/--json`, `cuopjit explain` and `cuopjit bench`: output parsed, on CPU and GPU."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cuopjit import cli
from cuopjit.cli import bench as cli_bench
from cuopjit.build import disasm
from cuopjit.ops import FAMILIES

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_show_ptx_targets_the_arch(capsys, arch):
    code, out, err = run(capsys, "show", "softmax", "--ptx", "--arch", arch)
    assert code == 0, err
    assert out.startswith("// softmax_") and f".target {arch}" in out and ".visible .entry softmax_" in out
    assert 'extern "C"' not in out   # PTX instead of the CUDA C


def test_show_json_is_parseable(capsys):
    code, out, err = run(capsys, "show", "gemm", "--json", "--all", "--ptx", "--arch", "sm_80", "--dtype", "float64")
    assert code == 0, err
    data = json.loads(out)
    assert data["arch"] == "sm_80" and len(data["kernels"]) >= 2
    for k in data["kernels"]:
        assert k["name"].startswith("gemm_f64") and k["template"] in ("gemm/gemm.cu.jinja", "gemm/gemm_async.cu.jinja")
        assert len(k["grid"]) == 3 and len(k["block"]) == 3 and ".target sm_80" in k["ptx"]
        assert 'extern "C" __global__' in k["source"]


@pytest.mark.parametrize("extra", [(), ("--json",), ("--ptx",)])
def test_show_sass_without_a_disassembler_fails_with_the_note_on_stderr(capsys, monkeypatch, extra):
    monkeypatch.setattr(disasm, "sass_tool", lambda: None)
    compiled = []
    monkeypatch.setattr(disasm, "ptx", lambda *a: compiled.append(a))
    code, out, err = run(capsys, "show", "relu", "--sass", *extra)
    assert (code, out, compiled) == (1, "", [])
    assert err == f"cuopjit show: error: {disasm.NO_SASS}\n"


def test_show_sass_disassembles_the_cached_cubin(capsys, monkeypatch):
    """The disassembler gets the cubin's path: a stand-in prints the ELF magic it read there."""
    tool = [sys.executable, "-c", "import sys; print('SASS', open(sys.argv[1], 'rb').read(4))"]
    monkeypatch.setattr(disasm, "sass_tool", lambda: tool)
    code, out, err = run(capsys, "show", "relu", "--sass", "--arch", "sm_80")
    assert code == 0, err
    assert out.splitlines()[0].startswith("// relu_f32") and "SASS b'\\x7fELF'" in out


def test_explain_cli_json_and_text(capsys):
    code, out, err = run(capsys, "explain", "layernorm", "--arch", "sm_80", "--shape", "7,33", "--json")
    assert code == 0, err
    e = json.loads(out)
    assert e["op"] == "LayerNormFloat" and e["problem"]["rows"] == 7 and e["problem"]["length"] == 33
    assert e["kernels"][0]["registers"] > 0 and e["measured"] is None
    code, out, err = run(capsys, "explain", "relu", "--arch", "sm_90", "--dtype", "float64", "--block-size", "128")
    assert code == 0, err
    assert "why:     user config: the kernel the family builds for block_size=128" in out
    assert "block [128, 1, 1]" in out


@pytest.mark.parametrize("args, message", [
    (("explain", "gemm", "--shape", "1,2", "--arch", "sm_90"), "gemm: --shape takes M,N,K, got 1,2"),
    (("explain", "gemm", "--arch", "sm_1"), "--arch sm_1 is not a target this NVRTC"),
    (("explain", "softmax", "--shape", "4x-1"), "--shape '4x-1' is not understood"),
])
def test_explain_bad_input(capsys, args, message):
    code, out, err = run(capsys, *args)
    assert code == 2 and message in err


def test_every_benchmark_workload_belongs_to_a_family():
    found = cli_bench.workloads(BENCHMARKS, list(FAMILIES), ["float32", "float64"], quick=False)
    assert found and {w["family"] for w in found} <= set(FAMILIES)
    assert {"gemm", "softmax", "layernorm", "batchnorm", "relu", "dot", "maxpool2d"} <= {w["family"] for w in found}


def test_bench_discovers_scripts_and_quick_keeps_the_smallest(tmp_path):
    (tmp_path / "mine.py").write_text(
        "WORKLOADS = [{'name': 'softmax_big', 'dtype': 'float32', 'bytes': 8},\n"
        "             {'name': 'softmax_small', 'dtype': 'float32', 'bytes': 2},\n"
        "             {'name': 'odd', 'family': 'relu', 'dtype': 'float64', 'bytes': 1},\n"
        "             {'name': 'globalmaxpool2d_x', 'dtype': 'float32', 'bytes': 1}]\n")
    (tmp_path / "helper.py").write_text("X = 1\n")       # no workloads: not imported
    found = cli_bench.workloads(tmp_path, list(FAMILIES), ["float32", "float64"], quick=True)
    assert sorted((w["family"], w["name"]) for w in found) == [
        ("globalmaxpool2d", "globalmaxpool2d_x"), ("relu", "odd"), ("softmax", "softmax_small")]
    assert cli_bench.workloads(tmp_path, ["softmax"], ["float64"], quick=False) == []


def test_bench_without_a_gpu_says_so():
    import cuopjit
    if cuopjit.get_device_count():
        pytest.skip("this machine has a GPU")
    out = subprocess.run([sys.executable, "-m", "cuopjit", "bench", "--quick"], capture_output=True, text=True)
    assert out.returncode == 1 and out.stderr == ("cuopjit bench: error: benchmarks time kernels on an NVIDIA GPU "
                                                  "and none was found\n")


def test_importing_cuopjit_never_imports_torch():
    code = ("import sys, cuopjit, cuopjit.cli; cuopjit.explain; cuopjit.memory_stats(); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


# --- GPU ---------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_bench_json_covers_every_family(tmp_path):
    pytest.importorskip("torch")
    out = subprocess.run([sys.executable, "-m", "cuopjit", "bench", "--quick", "--json", "--repeat", "20",
                          "--out", str(tmp_path / "b")], capture_output=True, text=True, timeout=280)
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert json.loads((tmp_path / "b.json").read_text())["rows"] == data["rows"]
    rows = data["rows"]
    from cuopjit.recipes import SHAPES
    for op in SHAPES:
        for dtype in ("float32", "float64"):
            mine = [r for r in rows if r["family"] == op and r["dtype"] == dtype]
            assert mine, f"no row for {op} {dtype}"
            for r in mine:
                assert r["cuopjit_ms"] > 0 and 0 < r["roofline_fraction"] < 1.2, r
                if r["script"] != "explain shape":
                    assert r["torch_ms"] > 0 and r["speedup_vs_torch"] > 0
                    assert r.get("rel_error") is None or r["rel_error"] < 1e-3, r
    assert "[" in out.stderr and "done" in out.stderr   # the progress bar
