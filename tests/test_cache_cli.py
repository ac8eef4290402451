"""`cuopjit cache ls/stats/clear/verify/prune/export/import`, and `prewarm --bundle`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cache_fakes import fake_cubin, make_spec
from cuopjit.cache import KernelCache
from cuopjit.cli.main import main
from cuopjit.config import get_default_global_jit_config

REPO = Path(__file__).resolve().parents[1]
SUBCOMMANDS = ("ls", "stats", "clear", "verify", "prune", "export", "import")


def _fill(root, n=3):
    cache = KernelCache(root)
    for i in range(n):
        cache.get_or_build(make_spec(i), lambda i=i: fake_cubin(make_spec(i)))
    return cache


def _cli(capsys, *argv) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_every_subcommand_has_help_with_cache_dir(sub, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["cache", sub, "--help"])
    assert exc.value.code == 0
    assert "--cache-dir DIR" in capsys.readouterr().out


def test_ls_shows_names_arch_params_and_readonly_layers(cache_dir, tmp_path, capsys, monkeypatch):
    _fill(cache_dir, 2)
    ro = tmp_path / "ro"
    KernelCache(ro).get_or_build(make_spec(9, "sm_80"), lambda: fake_cubin(make_spec(9, "sm_80")))
    monkeypatch.setenv("CUOPJIT_CACHE_READONLY", str(ro))
    rc, out, _ = _cli(capsys, "cache", "ls")
    assert rc == 0 and out.splitlines()[-1] == "3 entries"
    assert any(line.startswith("fake_k1_sm90 ") and "sm_90" in line and "fake.cu.jinja i=1" in line
               for line in out.splitlines())
    assert any(line.startswith("fake_k9_sm80 ") and line.endswith("[read-only]") for line in out.splitlines())


def test_stats_json_from_another_process_sees_this_process_counts(cache_dir):
    cache = _fill(cache_dir, 3)
    KernelCache(cache_dir).get_or_build(make_spec(0), lambda: b"")
    cache.layer.entry_path(make_spec(1)).write_bytes(b"junk")
    KernelCache(cache_dir).get_or_build(make_spec(1), lambda: fake_cubin(make_spec(1)))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "cuopjit", "cache", "stats", "--json", "--cache-dir",
                           str(cache_dir)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert (s["entries"], s["hits"], s["misses"], s["compiles"], s["rejected"]) == (3, 1, 4, 4, 1)
    assert s["bytes"] > 3 * 4096 and s["writable"] is True and s["directory"] == str(cache_dir)


def test_verify_exits_nonzero_on_bad_entries_and_fix_moves_them(cache_dir, capsys):
    cache = _fill(cache_dir)
    assert _cli(capsys, "cache", "verify")[:2] == (0, "3 entries ok, 0 bad\n")
    bad = cache.layer.entry_path(make_spec(2))
    bad.write_bytes(bad.read_bytes()[:100])
    rc, out, _ = _cli(capsys, "cache", "verify")
    assert rc == 1 and f"BAD {bad}: truncated:" in out and out.endswith("2 entries ok, 1 bad\n")
    rc, out, _ = _cli(capsys, "cache", "verify", "--fix")
    assert rc == 1 and "moved 1 aside" in out and not bad.exists()
    assert _cli(capsys, "cache", "verify")[0] == 0


def test_prune_and_clear(cache_dir, capsys):
    _fill(cache_dir, 4)
    rc, out, _ = _cli(capsys, "cache", "prune", "--max-size", "10K")
    assert rc == 0 and out.startswith("evicted 2 entries")
    rc, out, _ = _cli(capsys, "cache", "clear")
    assert (rc, out) == (0, f"removed 2 entries from {cache_dir}\n")
    assert KernelCache(cache_dir).stats().entries == 0 and KernelCache(cache_dir).stats().compiles == 0


def test_bad_input_exits_nonzero_with_one_line_reason(cache_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["cache", "prune", "--max-size", "lots"])
    assert exc.value.code == 2
    assert "argument --max-size: size 'lots' is not understood: write a number of bytes or e.g. 500M" in \
        capsys.readouterr().err
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"junk")
    rc, _, err = _cli(capsys, "cache", "import", str(junk))
    assert rc == 1 and err == (f"cuopjit cache: error: {junk} is not a readable cuopjit bundle (not a tar archive); "
                               "make one with `cuopjit cache export`\n")
    rc, _, err = _cli(capsys, "cache", "import", str(tmp_path / "missing.tar.gz"))
    assert rc == 1 and "missing.tar.gz is not a readable cuopjit bundle (No such file or directory)" in err


def test_export_then_import_with_cache_dir(cache_dir, tmp_path, capsys):
    _fill(cache_dir, 3)
    bundle = tmp_path / "b.tar.gz"
    assert _cli(capsys, "cache", "export", str(bundle))[:2] == (0, f"exported 3 entries and 0 records to {bundle}\n")
    rc, out, _ = _cli(capsys, "cache", "import", str(bundle), "--cache-dir", str(tmp_path / "other"))
    assert (rc, out) == (0, "imported 3 entries and 0 records (0 already present, 0 bad)\n")


def test_prewarm_bundle_builds_a_bundle_without_a_gpu(cache_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(get_default_global_jit_config(), "cache_dir", None)
    bundle = tmp_path / "prewarmed.tar.gz"
    rc, out, err = _cli(capsys, "prewarm", "--arch", "sm_80", "--op", "gemm", "--dtype", "float32",
                        "--cache-dir", str(cache_dir), "--bundle", str(bundle), "--quiet")
    assert rc == 0, err
    assert f"bundle written to {bundle}" in out
    target = KernelCache(tmp_path / "target")
    result = target.import_bundle(bundle)
    assert result.entries > 0 and result.bad == []
    entries = target.entries()
    assert all(e.arch == "sm_80" for e in entries)     # the GEMM kernels and the split-K sum of the small shapes
    assert {e.template for e in entries} == {"gemm/gemm.cu.jinja", "gemm/splitk_reduce.cu.jinja"}


RUN_COMMANDS = """
    import contextlib, io, json
    for argv in {commands!r}:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()) as out:
            rc = cuopjit.cli.main(argv)
        print(json.dumps([argv, rc, out.getvalue(), err.getvalue()]))
"""


def _run_commands(unprivileged, commands, env) -> dict[str, tuple[int, str, str]]:
    """{first words of the command: (rc, stdout, stderr)} of `cuopjit <command>` for each, as the scenario user."""
    proc = unprivileged.run(RUN_COMMANDS.format(commands=commands), env=env)
    assert proc.returncode == 0, proc.stderr
    return {" ".join(argv[:2]): (rc, out, err) for argv, rc, out, err in map(json.loads, proc.stdout.splitlines())}


def _commands(scratch) -> list[list[str]]:
    return [["cache", "ls"], ["cache", "stats"], ["cache", "clear"], ["cache", "verify"],
            ["cache", "prune", "--max-size", "1M"], ["cache", "export", str(scratch / "out.tar.gz")],
            ["cache", "import", str(scratch / "in.tar.gz")],
            ["prewarm", "--arch", "sm_80", "--op", "relu", "--dtype", "float32"]]


def test_every_command_gives_one_line_for_a_cache_the_user_cannot_reach(unprivileged):
    scratch = unprivileged.scratch()
    home = scratch / "root-home"
    home.mkdir()
    unprivileged.deny(home)
    results = _run_commands(unprivileged, _commands(scratch), {"HOME": str(home)})
    problem = f"cannot reach {home}/.cache/cuopjit (Permission denied); fix its permissions"
    for command, (rc, out, err) in results.items():
        assert rc == 1 and len(err.splitlines()) == 1 and "Errno" not in err, (command, err)
        expected = "nothing can be prewarmed" if command.startswith("prewarm") else "cannot use the cache"
        assert err.startswith(f"cuopjit {command.split()[0]}: error: {expected}: {problem}"), (command, err)


def test_readable_but_unwritable_cache_is_listed_but_not_changed(unprivileged):
    scratch = unprivileged.scratch()
    cache = scratch / "cache"
    _fill(cache, 2)
    _fill(scratch / "source", 3).export_bundle(scratch / "in.tar.gz")
    unprivileged.give(scratch)
    unprivileged.give(cache, mode=0o500)
    commands = [c if c[1:] != ["stats"] else [*c, "--json"] for c in _commands(scratch)]
    results = _run_commands(unprivileged, commands, {"CUOPJIT_CACHE_DIR": str(cache)})
    rc, out, _ = results["cache ls"]
    assert rc == 0 and out.endswith("2 entries\n")
    assert results["cache verify"][:2] == (0, "2 entries ok, 0 bad\n")
    assert results["cache export"][0] == 0 and (scratch / "out.tar.gz").exists()
    stats = json.loads(results["cache stats"][1])
    assert (stats["entries"], stats["writable"]) == (2, False)
    for command, verb in [("cache clear", "cleared"), ("cache prune", "pruned"), ("cache import", "imported"),
                          ("prewarm --arch", "prewarmed")]:
        rc, _, err = results[command]
        assert rc == 1 and err == (f"cuopjit {command.split()[0]}: error: nothing can be {verb}: {cache} is not "
                                   "writable (permission denied); fix its permissions (chown/chmod) or free space, "
                                   "or set CUOPJIT_CACHE_DIR (or pass --cache-dir) to a directory you can write\n")
    assert len(list((cache / "kernels").iterdir())) == 2


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_a_cache_path_that_is_a_file_is_an_error_not_an_empty_cache(sub, tmp_path, capsys):
    path = tmp_path / "cache"
    path.write_text("a file")
    extra = {"prune": ["--max-size", "1M"], "export": [str(tmp_path / "b.tar.gz")],
             "import": [str(tmp_path / "b.tar.gz")]}.get(sub, [])
    rc, out, err = _cli(capsys, "cache", sub, *extra, "--cache-dir", str(path))
    assert (rc, out) == (1, "")
    assert err == (f"cuopjit cache: error: cannot use the cache: {path} is a file, not a directory; point "
                   "CUOPJIT_CACHE_DIR (or --cache-dir) at a directory, not a file (or move the file out of the way)\n")


def test_clear_on_a_fresh_machine_succeeds_and_creates_nothing(tmp_path, capsys):
    fresh = tmp_path / "never-used"
    assert _cli(capsys, "cache", "clear", "--cache-dir", str(fresh)) == (0, f"removed 0 entries from {fresh}\n", "")
    assert not fresh.exists()


def test_ls_columns_stay_aligned_for_long_names(cache_dir, capsys):
    from cuopjit.cache import EntrySpec
    long = EntrySpec(name="layernorm_f64_" + "x" * 60 + "_sm90", source="// long\n", options=("-a",), arch="sm_90",
                     nvrtc_version="13.5", template="fake.cu.jinja", params=(("i", "1"),))
    cache = _fill(cache_dir, 2)
    cache.get_or_build(long, lambda: fake_cubin(long))
    rc, out, _ = _cli(capsys, "cache", "ls")
    rows = out.splitlines()[:-1]
    assert rc == 0 and len(rows) == 3
    assert len({row.index(" sm_90 ") for row in rows}) == 1
    assert any(row.startswith(long.name + " ") for row in rows)


def test_verify_states_each_reason_once(cache_dir, capsys):
    cache = _fill(cache_dir, 1)
    bad = cache.layer.entry_path(make_spec(0))
    bad.write_bytes(bad.read_bytes()[:100])
    rc, out, _ = _cli(capsys, "cache", "verify")
    assert rc == 1 and f"BAD {bad}: truncated: " in out and "truncated: truncated" not in out


def test_export_to_a_missing_directory_names_it_without_temp_files(cache_dir, tmp_path, capsys):
    _fill(cache_dir, 1)
    target = tmp_path / "missing" / "k.tar.gz"
    rc, _, err = _cli(capsys, "cache", "export", str(target))
    assert (rc, err) == (1, f"cuopjit cache: error: cannot write the bundle {target}: the directory "
                            f"{target.parent} does not exist; create it first\n")


def test_bad_log_or_arch_variables_do_not_stop_ls_or_info(cache_dir):
    _fill(cache_dir, 1)
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUOPJIT_LOG": "loud", "CUOPJIT_ARCH": "ampere"}
    ls = subprocess.run([sys.executable, "-m", "cuopjit", "cache", "ls"], capture_output=True, text=True, env=env)
    assert ls.returncode == 0 and ls.stdout.endswith("1 entries\n"), ls.stderr
    assert "CUOPJIT_LOG='loud' is not understood" in ls.stderr and "CUOPJIT_ARCH='ampere'" in ls.stderr
    info = subprocess.run([sys.executable, "-m", "cuopjit", "info"], capture_output=True, text=True, env=env)
    assert info.returncode == 0, info.stderr
    assert "CUOPJIT_ARCH: 'ampere' (ignored: CUOPJIT_ARCH='ampere' is not understood" in info.stdout
    assert "CUOPJIT_LOG: 'loud' (ignored: CUOPJIT_LOG='loud' is not understood" in info.stdout
