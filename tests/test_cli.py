"""The cuopjit command end to end, in a private cache directory, on a machine without a GPU."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tarfile

import pytest


def cuopjit(*args: str, cache_dir=None, env=None) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", **(env or {})}
    if cache_dir is not None:
        env["CUOPJIT_CACHE_DIR"] = str(cache_dir)
    return subprocess.run([sys.executable, "-m", "cuopjit", *args], capture_output=True, text=True, env=env)


def test_prewarm_twice_compiles_once(cache_dir):
    first = cuopjit("prewarm", "--arch", "sm_80,sm_90", "--op", "gemm", "--dtype", "float32", "--verbose",
                    cache_dir=cache_dir)
    assert first.returncode == 0, first.stderr
    m = re.search(r"prewarmed (\d+) kernels for sm_80, sm_90 in [\d.]+ s: (\d+) compiled, 0 already cached",
                  first.stdout)
    assert m and m.group(1) == m.group(2) and int(m.group(1)) >= 2, first.stdout
    assert re.search(r"\[1/\d+\] gemm_f32_\S+ sm_(80|90): compiled in \d+ ms", first.stdout)
    second = cuopjit("prewarm", "--arch", "sm_80,sm_90", "--op", "gemm", "--dtype", "float32", "--quiet",
                     cache_dir=cache_dir)
    assert f"0 compiled, {m.group(1)} already cached" in second.stdout, second.stdout


def test_show_prints_the_rendered_kernel_and_its_units():
    out = cuopjit("show", "gemm", "--dtype", "float32", "--tile-size", "64", "--tensor-core", "--arch", "sm_80")
    assert out.returncode == 0, out.stderr   # (sm_90 float32 tensor cores are wgmma: tests/test_gemm_wgmma.py)
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


def test_info_without_gpu(tmp_path):
    out = cuopjit("info", cache_dir=tmp_path / "fresh")
    assert out.returncode == 0, out.stderr
    assert re.search(r"nvrtc: \d+\.\d+", out.stdout) and "cache_dir" in out.stdout


@pytest.mark.parametrize("command", ["prewarm", "show", "info", "cache", "explain", "bench"])
def test_help(command):
    out = cuopjit(command, "--help")
    assert out.returncode == 0 and "usage: cuopjit" in out.stdout


def _prewarmed(stdout: str) -> tuple[int, str]:
    """(kernel count, architectures) from prewarm's summary line."""
    m = re.search(r"prewarmed (\d+) kernels for ([\w, ]+) in", stdout)
    assert m, stdout
    return int(m.group(1)), m.group(2)


def test_lists_are_accepted_with_commas_and_repetition(cache_dir):
    from cuopjit.prewarm import kernels_to_build, representative_plans
    expected = len(kernels_to_build(representative_plans(["relu", "scal"], None, ["sm_80"])))
    out = cuopjit("prewarm", "--arch", "sm_80", "--op", "relu,scal", "--op", "relu", "--dtype", "float32,float64",
                  "--dtype", "float64", "--quiet", cache_dir=cache_dir)
    assert out.returncode == 0, out.stderr
    assert _prewarmed(out.stdout) == (expected, "sm_80")
    out = cuopjit("prewarm", "--arch", "sm_80", "--arch", "sm_90,sm_80", "--op", "relu", "--dtype", "float32",
                  "--quiet", cache_dir=cache_dir)
    assert _prewarmed(out.stdout)[1] == "sm_80, sm_90"


def test_arch_variable_holds_the_default_list(cache_dir):
    out = cuopjit("prewarm", "--op", "relu", "--dtype", "float32", "--quiet", cache_dir=cache_dir,
                  env={"CUOPJIT_ARCH": "sm_80,sm_90"})
    assert out.returncode == 0, out.stderr
    assert _prewarmed(out.stdout)[1] == "sm_80, sm_90"


def test_architectures_below_the_minimum_are_refused_up_front(cache_dir):
    out = cuopjit("prewarm", "--arch", "sm_75", "--op", "gemm", cache_dir=cache_dir)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("cuopjit prewarm: error: --arch sm_75 is older than sm_80, the oldest architecture "
                                 "cuopjit supports: choose from sm_80, ")
    info = cuopjit("info")
    targets = re.search(r"nvrtc_targets: (.*)", info.stdout).group(1).split()
    assert targets[0] == "sm_80" and "sm_75" not in targets


def test_prewarm_says_how_many_were_stored(cache_dir):
    out = cuopjit("prewarm", "--arch", "sm_80", "--op", "relu", "--dtype", "float32", "--quiet", cache_dir=cache_dir)
    n, _ = _prewarmed(out.stdout)
    assert out.returncode == 0 and f": {n} compiled, 0 already cached; {n} stored in {cache_dir}\n" in out.stdout
    assert len(list((cache_dir / "kernels").iterdir())) == n


def test_prewarm_fails_when_nothing_reaches_the_cache(cache_dir, monkeypatch, capsys):
    from cache_fakes import fill_disk
    from cuopjit.cli.main import main
    from cuopjit.config import get_default_global_jit_config
    monkeypatch.setattr(get_default_global_jit_config(), "cache_dir", None)  # prewarm --cache-dir sets it
    fill_disk(monkeypatch)
    rc = main(["prewarm", "--arch", "sm_80", "--op", "relu", "--dtype", "float32", "--quiet",
               "--cache-dir", str(cache_dir)])
    out, err = capsys.readouterr()
    n, _ = _prewarmed(out)
    assert rc == 1 and f"{n} compiled, 0 already cached; 0 stored in {cache_dir}" in out
    assert err.splitlines()[-1] == (f"cuopjit prewarm: error: {n} of {n} compiled kernels could not be stored: "
                                    f"{cache_dir} is not writable (No space left on device); fix its permissions "
                                    "(chown/chmod) or free space, or set CUOPJIT_CACHE_DIR (or pass --cache-dir) to "
                                    "a directory you can write")


def test_prewarm_bundle_holds_only_what_this_prewarm_built_or_needed(cache_dir, tmp_path):
    from cache_fakes import fake_cubin, make_spec
    from cuopjit.cache import KernelCache
    KernelCache(cache_dir).get_or_build(make_spec(1), lambda: fake_cubin(make_spec(1)))
    names = []
    for run in ("built", "needed"):
        bundle = tmp_path / f"{run}.tar.gz"
        out = cuopjit("prewarm", "--arch", "sm_80", "--op", "relu", "--dtype", "float32", "--quiet",
                      "--bundle", str(bundle), cache_dir=cache_dir)
        assert out.returncode == 0, out.stderr
        n, _ = _prewarmed(out.stdout)
        assert f"bundle written to {bundle} ({n} entries)" in out.stdout
        with tarfile.open(bundle) as tar:
            names.append(sorted(e["name"] for e in json.load(tar.extractfile("manifest.json"))["entries"]))
        assert len(names[-1]) == n and all(name.startswith("relu_f32_") for name in names[-1])
    assert names[0] == names[1]


@pytest.mark.parametrize("bundle, message", [
    ("missing/k.tar.gz", "the directory {tmp}/missing does not exist; create it first"),
    ("", "it is a directory; name a file such as kernels.tar.gz"),
], ids=["missing-directory", "a-directory"])
def test_prewarm_bundle_path_is_checked_before_compiling(cache_dir, tmp_path, bundle, message):
    target = tmp_path / bundle
    out = cuopjit("prewarm", "--arch", "sm_80", "--op", "gemm", "--bundle", str(target), cache_dir=cache_dir)
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr == f"cuopjit prewarm: error: cannot write the bundle {target}: " \
                         f"{message.format(tmp=tmp_path)}\n"
    assert not (cache_dir / "kernels").exists()


def test_jobs_must_be_positive(cache_dir):
    out = cuopjit("prewarm", "--arch", "sm_80", "--jobs", "-1", cache_dir=cache_dir)
    assert out.returncode == 2 and out.stderr == ("cuopjit prewarm: error: --jobs -1 is not allowed: give the number "
                                                  "of parallel compiles, 1 or more (0: max_compilation_threads)\n")


def test_ctrl_c_exits_130_with_one_line(cache_dir):
    env = {"PATH": "/usr/bin:/bin", "CUOPJIT_CACHE_DIR": str(cache_dir)}
    proc = subprocess.Popen([sys.executable, "-m", "cuopjit", "prewarm", "--arch", "sm_90", "--jobs", "1", "--verbose"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().startswith("[1/")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert (proc.returncode, err) == (130, "cuopjit prewarm: interrupted\n")


def test_version_and_python_dash_m():
    import cuopjit as package
    out = subprocess.run([sys.executable, "-m", "cuopjit", "--version"], capture_output=True, text=True)
    assert (out.returncode, out.stdout) == (0, f"cuopjit {package.__version__}\n")
    out = subprocess.run([sys.executable, "-m", "cuopjit", "show", "relu"], capture_output=True, text=True)
    assert out.returncode == 0 and 'extern "C" __global__' in out.stdout



def test_prewarm_builds_every_kernel_for_every_arch(cache_dir, capsys, monkeypatch):
    from cuopjit.cache import KernelCache
    from cuopjit.cli.main import main
    from cuopjit.config import get_default_global_jit_config
    monkeypatch.setattr(get_default_global_jit_config(), "cache_dir", None)  # prewarm --cache-dir sets it
    from cuopjit.prewarm import kernels_to_build, representative_plans
    rc = main(["prewarm", "--arch", "sm_80,sm_90", "--op", "relu", "--dtype", "float32", "--quiet",
               "--cache-dir", str(cache_dir)])
    assert rc == 0, capsys.readouterr().err
    want = {(spec.name, arch) for spec, arch in kernels_to_build(representative_plans(["relu"], ["float32"],
                                                                                      ["sm_80", "sm_90"]))}
    got = {(e.name.rsplit("_", 1)[0], e.arch) for e in KernelCache(cache_dir).entries()}
    assert got == want and {arch for _, arch in got} == {"sm_80", "sm_90"}
    assert {e.arch for e in KernelCache(cache_dir).entries()} == {"sm_80", "sm_90"}


def test_a_compile_error_in_prewarm_exits_nonzero(cache_dir, monkeypatch, capsys):
    from cuopjit import CompileError
    from cuopjit.build import pipeline
    from cuopjit.cli.main import main
    from cuopjit.config import get_default_global_jit_config
    monkeypatch.setattr(get_default_global_jit_config(), "cache_dir", None)  # prewarm --cache-dir sets it
    real = pipeline.build

    def broken(spec, arch, *args, **kwargs):
        if arch == "sm_90":
            raise CompileError(f"NVRTC could not compile {spec.name} for {arch}:\nerror: boom")
        return real(spec, arch, *args, **kwargs)
    monkeypatch.setattr(pipeline, "build", broken)
    rc = main(["prewarm", "--arch", "sm_80,sm_90", "--op", "relu", "--dtype", "float32", "--quiet",
               "--cache-dir", str(cache_dir)])
    out, err = capsys.readouterr()
    assert rc == 1 and "prewarmed" not in out
    assert err.startswith("cuopjit prewarm: error: NVRTC could not compile relu_f32_") and "error: boom" in err


def test_cache_import_of_a_bundle_with_bad_entries_exits_nonzero(cache_dir, tmp_path, capsys):
    from cache_fakes import fake_cubin, make_spec
    from cuopjit.cache import KernelCache
    from cuopjit.cli.main import main
    cache = KernelCache(tmp_path / "source")
    for i in range(3):
        cache.get_or_build(make_spec(i), lambda i=i: fake_cubin(make_spec(i)))
    bundle = tmp_path / "k.tar.gz"
    cache.export_bundle(bundle)
    assert main(["cache", "import", str(bundle), "--cache-dir", str(cache_dir)]) == 0
    assert capsys.readouterr().out == "imported 3 entries and 0 records (0 already present, 0 bad)\n"
    with tarfile.open(bundle) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    victim = f"kernels/{make_spec(1).file_name}"
    members[victim] = members[victim][:-1] + b"!"
    import io
    with tarfile.open(bundle, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    fresh = tmp_path / "fresh"
    rc = main(["cache", "import", str(bundle), "--cache-dir", str(fresh)])
    out, err = capsys.readouterr()
    assert rc == 1 and out == "imported 2 entries and 0 records (0 already present, 1 bad)\n"
    assert err == f"BAD {victim}: sha256 differs from the manifest\n"


def test_error_lines_name_the_file_and_keep_a_compile_log_whole():
    from cuopjit import CompileError
    from cuopjit.cli.main import _reason
    assert _reason(FileNotFoundError(2, "No such file or directory", "/x/k.tar.gz")) == \
        "No such file or directory: /x/k.tar.gz"
    assert _reason(PermissionError(13, "Permission denied")) == "Permission denied"
    assert _reason(ValueError("first line\nsecond line")) == "first line"
    assert _reason(ValueError("  ")) == "ValueError"
    assert _reason(CompileError("NVRTC could not compile k:\nerror: boom\nconfig: x")) == \
        "NVRTC could not compile k:\nerror: boom\nconfig: x"


# --- what a new user meets (issue 28) ----------------------------------------------------------------------
def test_a_fresh_cache_counts_each_kernel_once(cache_dir):
    """dot's partial and final sums are two entry points of one cubin: built and counted once, none 'cached'."""
    out = cuopjit("prewarm", "--arch", "sm_80", "--op", "dot", "--dtype", "float32", "--quiet", cache_dir=cache_dir)
    n, _ = _prewarmed(out.stdout)
    assert out.returncode == 0 and f": {n} compiled, 0 already cached; {n} stored" in out.stdout, out.stdout
    assert len(list((cache_dir / "kernels").iterdir())) == n


def test_kernels_to_build_holds_each_cubin_once():
    from cuopjit.build import pipeline
    from cuopjit.prewarm import kernels_to_build, representative_plans
    pairs = kernels_to_build(representative_plans(["dot", "gemm", "symm"], None, ["sm_80", "sm_90", "sm_90a"]))
    keys = [pipeline.entry_spec(spec, arch).key for spec, arch in pairs]
    assert len(keys) == len(set(keys))
    planned = representative_plans(["dot"], ["float64"], ["sm_90"])
    assert all(len(p.plan.launches) == 2 for p in planned)
    assert len(kernels_to_build(planned)) == len({p.plan.launches[0].spec.name for p in planned})


def test_prewarm_off_a_terminal_prints_a_few_plain_lines_then_the_summary(cache_dir):
    out = cuopjit("prewarm", "--arch", "sm_80,sm_90", "--op", "relu,scal,copy,softmax", "--dtype", "float32",
                  cache_dir=cache_dir)
    n, _ = _prewarmed(out.stdout)
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and n > 10 and 2 <= len(lines) <= 11 and "\r" not in out.stdout, out.stdout
    assert all(re.fullmatch(r"\[[#.]{24}\] \d+/%d kernels \(\d+ compiled\)" % n, line) for line in lines[:-1])
    assert lines[-2] == f"[{'#' * 24}] {n}/{n} kernels ({n} compiled)" and lines[-1].startswith("prewarmed ")


def test_prewarm_on_a_terminal_redraws_one_line(cache_dir, capsys, monkeypatch):
    import io
    from cuopjit.cli.main import main

    class Terminal(io.StringIO):
        def isatty(self):
            return True
    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["prewarm", "--arch", "sm_80", "--op", "relu,scal", "--dtype", "float32"]) == 0
    text = terminal.getvalue()
    bar, summary, end = text.split("\n")
    n, _ = _prewarmed(summary)
    assert end == "" and text.count("\r") == n + 1, repr(text)
    assert bar.rstrip().endswith(f"] {n}/{n} kernels ({n} compiled)"), repr(text)
    assert all(len(line) <= 79 for line in bar.split("\r")[1:])   # never as wide as the terminal (80 here)


def test_quiet_and_verbose_contradict(cache_dir):
    out = cuopjit("prewarm", "--arch", "sm_80", "--quiet", "--verbose", cache_dir=cache_dir)
    assert (out.returncode, out.stderr) == (2, "cuopjit prewarm: error: --quiet and --verbose contradict each "
                                                "other: give one\n")


@pytest.mark.parametrize("spelling, meant", [("90", "sm_90"), ("SM_90", "sm_90"), ("compute_90", "sm_90"),
                                             ("sm90", "sm_90"), ("90a", "sm_90a"), ("8.0", "sm_80")])
def test_architecture_spellings_get_a_did_you_mean(spelling, meant, cache_dir):
    out = cuopjit("prewarm", "--arch", spelling, "--op", "relu", cache_dir=cache_dir)
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == f"cuopjit prewarm: error: --arch {spelling} is not an architecture name: did you mean " \
                         f"{meant}?\n"
    out = cuopjit("prewarm", "--op", "relu", cache_dir=cache_dir, env={"CUOPJIT_ARCH": f"sm_80,{spelling}"})
    assert out.returncode == 2 and out.stderr == f"cuopjit prewarm: error: CUOPJIT_ARCH {spelling} is not an " \
                                                 f"architecture name: did you mean {meant}?\n"
    out = cuopjit("show", "relu", "--arch", spelling)
    assert out.returncode == 2 and f"did you mean {meant}?" in out.stderr


@pytest.mark.parametrize("args, message", [
    (("tune", "softmax", "--shape", "1,1,1"), "'softmax' cannot be tuned from the command line: choose gemm, conv2d"),
    (("bench",), "benchmarks time kernels on an NVIDIA GPU and none was found"),
    (("explain", "gemm", "--shape", "1,2"), "gemm: --shape takes M,N,K, got 1,2"),
])
def test_every_error_has_the_command_prefix_once(args, message):
    import cuopjit as package
    if args[0] == "bench" and package.get_device_count():
        pytest.skip("this machine has a GPU")
    out = cuopjit(*args)
    assert out.stderr == f"cuopjit {args[0]}: error: {message}\n"


def test_a_prefixed_message_is_not_prefixed_again(capsys, monkeypatch):
    from cuopjit.cli import inspect
    from cuopjit.cli.main import main

    def prefixed(*args):
        raise ValueError("cuopjit explain: x")
    monkeypatch.setattr(inspect, "explain_family", prefixed)
    assert main(["explain", "relu", "--arch", "sm_80"]) == 2
    assert capsys.readouterr().err == "cuopjit explain: error: x\n"


def test_info_marks_a_cache_path_that_is_a_file_and_exits_1(tmp_path):
    path = tmp_path / "cache"
    path.write_text("not a directory")
    out = cuopjit("info", cache_dir=path)
    assert out.returncode == 1
    assert f"cache_dir: {path}  [UNUSABLE: {path} is a file, not a directory]" in out.stdout
    assert out.stderr == (f"cuopjit info: error: cannot use the cache: {path} is a file, not a directory; point "
                          "CUOPJIT_CACHE_DIR (or --cache-dir) at a directory, not a file (or move the file out of "
                          "the way)\n")


def test_prewarm_into_a_file_says_to_point_the_variable_at_a_directory(tmp_path):
    path = tmp_path / "cache"
    path.write_text("not a directory")
    out = cuopjit("prewarm", "--arch", "sm_80", "--op", "relu", cache_dir=path)
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr == (f"cuopjit prewarm: error: nothing can be prewarmed: {path} is a file, not a directory; "
                          "point CUOPJIT_CACHE_DIR (or --cache-dir) at a directory, not a file (or move the file out "
                          "of the way)\n")
    assert "chown" not in out.stderr


@pytest.mark.parametrize("denied, problem", [(os.R_OK, "cannot read {path} (permission denied)"),
                                             (os.W_OK, "{path} is not writable (permission denied)")])
def test_info_marks_an_unreadable_or_unwritable_cache_and_exits_1(cache_dir, capsys, monkeypatch, denied, problem):
    """os.access as an unprivileged user would answer (root's answer is always yes)."""
    from cuopjit.cache import access
    from cuopjit.cli.main import main
    cache_dir.mkdir()
    real = os.access
    monkeypatch.setattr(access.os, "access", lambda p, mode: real(p, mode) and not (
        str(p).startswith(str(cache_dir)) and mode & denied))
    assert main(["info"]) == 1
    out, err = capsys.readouterr()
    problem = problem.format(path=cache_dir)
    assert f"cache_dir: {cache_dir}  [UNUSABLE: {problem}]" in out
    assert err == (f"cuopjit info: error: cannot use the cache: {problem}; fix its permissions (chown/chmod) or free "
                   "space, or set CUOPJIT_CACHE_DIR (or pass --cache-dir) to a directory you can write\n")
