"""Cache directories the user cannot use: one warning naming the directory and the fix, then memory only.

The permission cases run as an unprivileged user (nobody when the tests run as root, as in CI),
through the `unprivileged` fixture, so that the permissions really bind.
"""
from __future__ import annotations

import logging
import os

import pytest

from cache_fakes import fake_cubin, make_spec
from unprivileged import IS_ROOT, one_warning
from cuopjit.build import pipeline
from cuopjit.cache import KernelCache
from cuopjit.config import scoped_env
from cuopjit.prewarm import representative_plans

BUILD_TWICE = """
    spec = representative_plans(["relu"], ["float32"])[0].plan.specs[0]
    for _ in range(2):
        cubin, info = pipeline.build(spec, "sm_80")
        print(len(cubin) > 1000, info.cache_hit, info.stored)
"""
FIX = "set CUOPJIT_CACHE_DIR (or pass --cache-dir) to a directory you can write"


def test_home_in_a_directory_the_user_cannot_enter_builds_from_memory(unprivileged):
    home = unprivileged.scratch() / "root-home"
    home.mkdir()
    unprivileged.deny(home)
    out = unprivileged.run(BUILD_TWICE, env={"HOME": str(home)})
    assert out.returncode == 0, out.stderr
    assert out.stdout == "True False False\nTrue True False\n"
    one_warning(out.stderr, f"cannot reach {home}/.cache/cuopjit (Permission denied)",
                 "compiled kernels are kept in memory for this process only", FIX)


@pytest.mark.parametrize("owner", [0, 12345], ids=["root", "another-user"])
@pytest.mark.parametrize("mode", [0o700, 0o500], ids=["0700", "0500"])
def test_cache_dir_of_another_user_builds_from_memory(unprivileged, owner, mode):
    cache = unprivileged.scratch() / "cache"
    KernelCache(cache).get_or_build(make_spec(1), lambda: fake_cubin(make_spec(1)))
    unprivileged.deny(cache, owner, mode)
    out = unprivileged.run(BUILD_TWICE, env={"CUOPJIT_CACHE_DIR": str(cache)})
    assert out.returncode == 0, out.stderr
    assert out.stdout == "True False False\nTrue True False\n"
    one_warning(out.stderr, f"cannot read {cache} (permission denied)", FIX)


def test_cache_path_that_is_a_file_builds_from_memory(tmp_path, caplog):
    path = tmp_path / "cache"
    path.write_text("not a directory")
    spec = representative_plans(["relu"], ["float32"])[0].plan.specs[0]
    with scoped_env(cache_dir=str(path)), caplog.at_level(logging.WARNING, logger="cuopjit"):
        first, second = pipeline.build(spec, "sm_80"), pipeline.build(spec, "sm_80")
        fake = KernelCache(path).get_or_build(make_spec(1), lambda: fake_cubin(make_spec(1)))
    assert first[0] == second[0] and (first[1].cache_hit, second[1].cache_hit) == (False, True)
    assert fake == (fake_cubin(make_spec(1)), False)
    assert caplog.text.count(f"cache: {path} is a file, not a directory; compiled kernels are kept in memory") == 1
    assert path.read_text() == "not a directory"


def test_cache_path_under_a_file_builds_from_memory(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("a file")
    cache = KernelCache(blocker / "cuopjit")
    with caplog.at_level(logging.WARNING, logger="cuopjit"):
        assert cache.get_or_build(make_spec(1), lambda: fake_cubin(make_spec(1))) == (fake_cubin(make_spec(1)), False)
    assert f"cache: {blocker}/cuopjit cannot be a directory: {blocker} is a file; compiled kernels are kept in " \
           "memory" in caplog.text
    assert cache.problem() == f"{blocker}/cuopjit cannot be a directory: {blocker} is a file"


def test_untrusted_readonly_layer_is_warned_about_once(cache_dir, tmp_path, caplog):
    layer = tmp_path / "shipped"
    KernelCache(layer).get_or_build(make_spec(1), lambda: fake_cubin(make_spec(1)))
    layer.chmod(0o777)
    cache = KernelCache(cache_dir, readonly=(layer,))
    with caplog.at_level(logging.WARNING, logger="cuopjit"):
        for i in range(1, 5):
            assert cache.get_or_build(make_spec(i), lambda i=i: fake_cubin(make_spec(i)))[1] is False
        cache.load_record("tuning", "key")
    assert caplog.text.count("cuopjit will not load it") == 1, caplog.text
    assert f"cache: skipping the read-only layer {layer} (CUOPJIT_CACHE_READONLY): {layer} is writable by other " \
           f"users (mode 777), so cuopjit will not load it; fix it with: chmod go-w {layer}" in caplog.text


def test_missing_readonly_layer_is_warned_about_once(cache_dir, tmp_path, caplog):
    missing = tmp_path / "nonexistent"
    cache = KernelCache(cache_dir, readonly=(missing,))
    with caplog.at_level(logging.WARNING, logger="cuopjit"):
        for i in range(3):
            cache.get_or_build(make_spec(i), lambda i=i: fake_cubin(make_spec(i)))
    assert caplog.text.count(f"cache: skipping the read-only layer {missing} (CUOPJIT_CACHE_READONLY): "
                             f"{missing} does not exist") == 1, caplog.text
    assert cache.stats().compiles == 3


@pytest.mark.skipif(not IS_ROOT, reason="only root can hand a directory to another user")
def test_runner_really_is_unprivileged(unprivileged):
    out = unprivileged.run("print(os.getuid(), os.getgid(), os.getgroups())")
    assert out.stdout.split() == ["65534", "65534", "[]"], out.stderr


def test_stats_say_not_writable_for_a_readonly_mount(cache_dir, monkeypatch):
    KernelCache(cache_dir).get_or_build(make_spec(1), lambda: fake_cubin(make_spec(1)))
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: not mode & os.W_OK and real_access(p, mode, **kw))
    stats = KernelCache(cache_dir).stats()
    assert (stats.entries, stats.writable) == (1, False)
