"""Layers and trust: read-only layers, unwritable or full disks, files other users could have written."""
from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest

from cache_fakes import build_counts, counting_build, fake_cubin, fill_disk, make_spec, temp_files
from unprivileged import IS_ROOT, one_warning
from cuopjit.cache import KernelCache, get_cache
from cuopjit.config import scoped_env


def _fill(root: Path, specs) -> None:
    cache = KernelCache(root)
    for s in specs:
        cache.get_or_build(s, lambda s=s: fake_cubin(s))


def _fail_writes_under(monkeypatch, root: Path, code: int) -> None:
    """Make every create/mkdir under `root` fail with `code`, as a read-only mount (EROFS) would."""
    real_open, real_mkdir = os.open, os.mkdir

    def guarded_open(path, flags, mode=0o777, *, dir_fd=None):
        if flags & os.O_CREAT and str(path).startswith(str(root)):
            raise OSError(code, os.strerror(code), str(path))
        return real_open(path, flags, mode, dir_fd=dir_fd)

    def guarded_mkdir(path, mode=0o777, *, dir_fd=None):
        if str(path).startswith(str(root)):
            raise OSError(code, os.strerror(code), str(path))
        return real_mkdir(path, mode, dir_fd=dir_fd)
    monkeypatch.setattr(os, "open", guarded_open)
    monkeypatch.setattr(os, "mkdir", guarded_mkdir)


def test_readonly_layers_are_searched_and_never_written(cache_dir, tmp_path):
    ro1, ro2 = tmp_path / "ro1", tmp_path / "ro2"
    _fill(ro1, [make_spec(1)])
    _fill(ro2, [make_spec(2)])
    log = tmp_path / "builds.log"
    with scoped_env(cache_readonly=os.pathsep.join([str(ro1), str(ro2)])):
        cache = get_cache()
        assert [str(layer.root) for layer in cache.readonly] == [str(ro1.resolve()), str(ro2.resolve())]
        for i, hit in ((1, True), (2, True), (3, False)):
            spec = make_spec(i)
            assert cache.get_or_build(spec, counting_build(spec, log)) == (fake_cubin(spec), hit)
    assert list(build_counts(log)) == [make_spec(3).key]
    assert [p.name for p in (cache_dir / "kernels").iterdir()] == [make_spec(3).file_name]
    assert KernelCache(cache_dir).stats().hits == 2


def test_corrupt_readonly_entry_is_left_in_place_and_rebuilt_into_the_writable_layer(cache_dir, tmp_path, caplog):
    ro, spec = tmp_path / "ro", make_spec(1)
    _fill(ro, [spec])
    bad = ro / "kernels" / spec.file_name
    bad.write_bytes(bad.read_bytes()[:-1])
    cache = KernelCache(cache_dir, readonly=(ro,))
    with caplog.at_level(logging.WARNING, logger="cuopjit"):
        assert cache.get_or_build(spec, lambda: fake_cubin(spec)) == (fake_cubin(spec), False)
    assert f"cache: rejected {bad} (truncated:" in caplog.text and "left in place" in caplog.text
    assert bad.exists() and (cache_dir / "kernels" / spec.file_name).exists()
    assert cache.stats().rejected == 1


def test_readonly_cache_dir_keeps_working_from_memory_and_warns_once(cache_dir, monkeypatch, caplog):
    old, new = make_spec(1), make_spec(2)
    _fill(cache_dir, [old])
    _fail_writes_under(monkeypatch, cache_dir, errno.EROFS)
    cache = KernelCache(cache_dir)
    with caplog.at_level(logging.WARNING, logger="cuopjit"):
        assert cache.get_or_build(old, lambda: pytest.fail("rebuilt")) == (fake_cubin(old), True)
        assert cache.get_or_build(new, lambda: fake_cubin(new)) == (fake_cubin(new), False)
        assert cache.get_or_build(new, lambda: pytest.fail("rebuilt")) == (fake_cubin(new), True)
        assert cache.get_or_build(make_spec(3), lambda: fake_cubin(make_spec(3)))[1] is False
    assert caplog.text.count(f"cache: {cache_dir} is not writable (Read-only file system); compiled kernels are "
                             "kept in memory for this process only") == 1
    assert not cache.writable and cache.stats().compiles == 2
    assert not (cache_dir / "kernels" / new.file_name).exists()


def test_permission_denied_cache_dir_loads_entries_and_builds_the_rest_in_memory(unprivileged):
    """Runs as an unprivileged user (nobody when the tests run as root), so the 0500 mode binds."""
    cache = unprivileged.scratch() / "cache"
    KernelCache(cache).get_or_build(make_spec(1), lambda: fake_cubin(make_spec(1)))
    unprivileged.give(cache, mode=0o500)
    out = unprivileged.run(f"""
        from cuopjit.cache import KernelCache
        from cache_fakes import fake_cubin, make_spec
        cache = KernelCache({str(cache)!r})
        print(cache.get_or_build(make_spec(1), lambda: 1 / 0) == (fake_cubin(make_spec(1)), True))
        for _ in range(2):
            print(cache.get_or_build(make_spec(2), lambda: fake_cubin(make_spec(2)))[1], cache.writable)
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "True\nFalse False\nTrue False\n"
    one_warning(out.stderr, f"cache: {cache} is not writable (permission denied); compiled kernels are kept in "
                            "memory for this process only", "set CUOPJIT_CACHE_DIR")
    assert sorted(p.name for p in (cache / "kernels").iterdir()) == [make_spec(1).file_name]


def test_full_disk_keeps_working_from_memory_and_leaves_no_temp_file(cache_dir, monkeypatch, caplog):
    spec = make_spec(1)
    KernelCache(cache_dir).layer.ensure_dirs()
    fill_disk(monkeypatch)
    cache = KernelCache(cache_dir)
    with caplog.at_level(logging.WARNING, logger="cuopjit"):
        assert cache.get_or_build(spec, lambda: fake_cubin(spec)) == (fake_cubin(spec), False)
        assert cache.get_or_build(spec, lambda: pytest.fail("rebuilt")) == (fake_cubin(spec), True)
    assert f"cache: {cache_dir} is not writable (No space left on device)" in caplog.text
    assert temp_files(cache_dir) == [] and list((cache_dir / "kernels").iterdir()) == []


def test_world_writable_cache_dir_is_not_trusted(cache_dir, caplog, tmp_path):
    spec = make_spec(1)
    _fill(cache_dir, [spec])
    cache_dir.chmod(0o777)
    log = tmp_path / "builds.log"
    with caplog.at_level(logging.WARNING, logger="cuopjit"):
        cache = KernelCache(cache_dir)
        assert cache.get_or_build(spec, counting_build(spec, log)) == (fake_cubin(spec), False)
    assert (f"{cache_dir} is writable by other users (mode 777), so cuopjit will not load it; "
            f"fix it with: chmod go-w {cache_dir}") in caplog.text
    assert not cache.writable and build_counts(log)[spec.key] == 1
    cache_dir.chmod(0o700)
    assert KernelCache(cache_dir).get_or_build(spec, lambda: pytest.fail("rebuilt")) == (fake_cubin(spec), True)


def test_group_writable_entry_is_not_loaded_and_is_replaced(cache_dir, caplog):
    spec = make_spec(1)
    _fill(cache_dir, [spec])
    path = cache_dir / "kernels" / spec.file_name
    path.chmod(0o664)
    with caplog.at_level(logging.WARNING, logger="cuopjit"):
        assert KernelCache(cache_dir).get_or_build(spec, lambda: fake_cubin(spec)) == (fake_cubin(spec), False)
    assert f"{path} is writable by other users (mode 664), so cuopjit will not load it; " \
           f"fix it with: chmod go-w {path}" in caplog.text
    assert path.stat().st_mode & 0o777 == 0o644


@pytest.mark.skipif(not IS_ROOT, reason="chown to another user needs root")
def test_entry_owned_by_another_user_is_not_loaded(cache_dir, caplog):
    spec = make_spec(1)
    _fill(cache_dir, [spec])
    path = cache_dir / "kernels" / spec.file_name
    os.chown(path, 12345, 12345)
    with caplog.at_level(logging.WARNING, logger="cuopjit"):
        assert KernelCache(cache_dir).get_or_build(spec, lambda: fake_cubin(spec)) == (fake_cubin(spec), False)
    assert (f"{path} is owned by uid 12345, not by you (uid 0) or root, so cuopjit will not load it; "
            f"if you trust it run: chown 0 {path}, else delete it") in caplog.text
    assert path.stat().st_uid == 0


def test_new_directories_are_private(cache_dir):
    _fill(cache_dir / "deep" / "er", [make_spec(1)])
    for d in (cache_dir, cache_dir / "deep", cache_dir / "deep" / "er", cache_dir / "deep" / "er" / "kernels"):
        assert d.stat().st_mode & 0o777 == 0o700, d


def test_invalidate_moves_the_entry_aside_and_the_next_lookup_rebuilds(cache_dir, tmp_path, caplog):
    spec, log = make_spec(1), tmp_path / "builds.log"
    cache = KernelCache(cache_dir)
    cache.get_or_build(spec, counting_build(spec, log))
    with caplog.at_level(logging.WARNING, logger="cuopjit"):
        cache.invalidate(spec, "CUDA_ERROR_INVALID_IMAGE")
    assert "the driver rejected it: CUDA_ERROR_INVALID_IMAGE" in caplog.text
    assert [p.name.split(".")[-2] for p in (cache_dir / "rejected").iterdir()] == ["driver"]
    assert cache.get_or_build(spec, counting_build(spec, log)) == (fake_cubin(spec), False)
    assert build_counts(log)[spec.key] == 2 and cache.stats().rejected == 1


def test_invalidated_readonly_entry_is_skipped_by_later_processes(cache_dir, tmp_path):
    ro, spec, log = tmp_path / "ro", make_spec(1), tmp_path / "builds.log"
    _fill(ro, [spec])
    cache = KernelCache(cache_dir, readonly=(ro,))
    assert cache.get_or_build(spec, counting_build(spec, log))[1] is True
    cache.invalidate(spec, "CUDA_ERROR_INVALID_IMAGE")
    assert (ro / "kernels" / spec.file_name).exists()
    assert cache.get_or_build(spec, counting_build(spec, log))[1] is False
    later = KernelCache(cache_dir, readonly=(ro,))
    assert later.get_or_build(spec, counting_build(spec, log)) == (fake_cubin(spec), True)
    assert build_counts(log)[spec.key] == 1
    assert later._origin[spec.key] is later.layer
