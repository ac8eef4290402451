"""The cuopjit command end to end, in a private cache directory, on a machine without a GPU."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest


def cuopjit(*args: str, cache_dir=None) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin"}
    if cache_dir is not None:
        env["CUOPJIT_CACHE_DIR"] = str(cache_dir)
    return subprocess.run([sys.executable, "-m", "cuopjit.cli", *args], capture_output=True, text=True, env=env)


def test_prewarm_twice_compiles_once(cache_dir):
    first = cuopjit("prewarm", "--arch", "sm_80,sm_90", "--op", "gemm", "--dtype", "float32", cache_dir=cache_dir)
    assert first.returncode == 0, first.stderr
    m = re.search(r"prewarmed (\d+) kernels for sm_80, sm_90 in [\d.]+ s: (\d+) compiled, 0 already cached",
                  first.stdout)
    assert m and m.group(1) == m.group(2) and int(m.group(1)) >= 2, first.stdout
    assert re.search(r"\[1/\d+\] gemm_f32_\S+ sm_(80|90): compiled in \d+ ms", first.stdout)
    second = cuopjit("prewarm", "--arch", "sm_80,sm_90", "--op", "gemm", "--dtype", "float32", "--quiet",
                     cache_dir=cache_dir)
    assert f"0 compiled, {m.group(1)} already cached" in second.stdout, second.stdout


def test_show_prints_the_rendered_kernel_and_its_units():
    out = cuopjit("show", "gemm", "--dtype", "float32", "--tile-size", "64", "--tensor-core")
    assert out.returncode == 0, out.stderr
    assert "BM=64" in out.stdout and "BN=64" in out.stdout
    assert out.stdout.startswith("// gemm_f32_t64x64") and "TF32 tensor cores" in out.stdout.splitlines()[0]
    assert 'extern "C" __global__' in out.stdout and "#line" in out.stdout


@pytest.mark.parametrize("args, message", [
    (("show", "gemm", "--tile-size", "3"), "tile_size=3 is not allowed"),
    (("show", "nosuchop"), "unknown op 'nosuchop'"),
    (("prewarm", "--arch", "sm_1"), "--arch sm_1 is not a target this NVRTC"),
    (("prewarm",), "name the target architectures"),
])
def test_bad_input_exits_non_zero_with_one_line(args, message):
    out = cuopjit(*args)
    assert out.returncode == 2
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_info_without_gpu():
    out = cuopjit("info")
    assert out.returncode == 0, out.stderr
    assert re.search(r"nvrtc: \d+\.\d+", out.stdout) and "cache_dir" in out.stdout


@pytest.mark.parametrize("command", ["prewarm", "show", "info", "cache"])
def test_help(command):
    out = cuopjit(command, "--help")
    assert out.returncode == 0 and "usage: cuopjit" in out.stdout
