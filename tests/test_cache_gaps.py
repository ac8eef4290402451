"""Cache behaviours a deliberate one-line bug used to get past: forged headers, memory-only races,
other-writable directories, record names that climb out of the records folder, `verify --fix` and
`clear` bookkeeping."""
from __future__ import annotations

import hashlib
import json
import os
import stat
import threading

import pytest

from cache_fakes import build_counts, counting_build, fake_cubin, make_spec, temp_files
from cuopjit.cache import KernelCache, entry, fsio, trust
from cuopjit.cache.bundle import import_bundle
from cuopjit.cache.entry import EntryError
from cuopjit.cache.layer import Layer, record_file_name


def _forge(data: bytes, **changes) -> bytes:
    """The entry `data` with header fields changed and the header checksum made valid again."""
    _, version, size, _ = entry._PREFIX.unpack_from(data)
    header = json.loads(data[entry._PREFIX.size:entry._PREFIX.size + size])
    header.update(changes)
    raw = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    payload = data[entry._PREFIX.size + size:]
    return entry._PREFIX.pack(entry.MAGIC, version, len(raw), hashlib.sha256(raw).digest()) + raw + payload


@pytest.mark.parametrize("field, value", [("source_sha256", "0" * 64), ("options", ["--gpu-architecture=sm_80"]),
                                          ("arch", "sm_80"), ("nvrtc_version", "12.9"), ("name", "../evil")])
def test_a_forged_header_with_a_valid_checksum_is_refused(field, value):
    spec = make_spec(1)
    data = entry.encode(spec, fake_cubin(spec))
    assert entry.decode(_forge(data)).key == spec.key          # re-encoding alone changes nothing
    with pytest.raises(EntryError, match="key: header key does not match its own parts") as info:
        entry.decode(_forge(data, **{field: value}))
    assert info.value.reason == "key"


def test_a_forged_entry_on_disk_is_rejected_and_rebuilt(cache_dir, tmp_path):
    spec, log = make_spec(2), tmp_path / "builds.log"
    cache = KernelCache(cache_dir)
    cache.get_or_build(spec, lambda: fake_cubin(spec))
    path = cache.layer.entry_path(spec)
    path.write_bytes(_forge(path.read_bytes(), source_sha256="1" * 64))
    fresh = KernelCache(cache_dir)
    assert fresh.get_or_build(spec, counting_build(spec, log)) == (fake_cubin(spec), False)
    assert build_counts(log) == {spec.key: 1}
    assert fresh.stats().rejected == 1 and len(list((cache_dir / "rejected").iterdir())) == 1


def test_an_entry_for_another_request_is_refused():
    spec, other = make_spec(1), make_spec(2)
    found = entry.decode(entry.encode(other, fake_cubin(other)))
    with pytest.raises(EntryError, match="key: entry has key"):
        entry.check_matches(found, spec)
    with pytest.raises(EntryError, match="arch: entry is for sm_90, wanted sm_80"):
        entry.check_matches(found, make_spec(2, "sm_80"))
    entry.check_matches(found, other)


def test_a_memory_only_cache_builds_one_key_once_from_8_threads(tmp_path):
    cache, log = KernelCache(None), tmp_path / "builds.log"
    spec = make_spec(5)
    start = threading.Barrier(8)
    out, errors = [], []

    def work():
        start.wait()
        try:
            out.append(cache.get_or_build(spec, counting_build(spec, log, delay=0.05)))
        except Exception as exc:   # pragma: no cover - reported below
            errors.append(exc)
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and build_counts(log) == {spec.key: 1}
    assert sorted(hit for _, hit in out) == [False] + [True] * 7
    assert all(cubin == fake_cubin(spec) for cubin, _ in out)
    assert cache.directory is None and not cache.writable and cache.stats().compiles == 1


@pytest.mark.parametrize("mode, trusted", [(0o702, False), (0o720, False), (0o722, False), (0o755, True),
                                           (0o700, True), (0o705, True)])
def test_a_directory_writable_by_group_or_others_is_not_trusted(tmp_path, mode, trusted):
    d = tmp_path / "layer"
    d.mkdir()
    d.chmod(mode)
    reason = trust.check_path(d)
    if trusted:
        assert reason is None
    else:
        assert reason == (f"{d} is writable by other users (mode {mode:o}), so cuopjit will not load it; fix it "
                          f"with: chmod go-w {d}")


def test_an_other_writable_readonly_layer_is_skipped(cache_dir, tmp_path):
    layer = tmp_path / "shipped"
    KernelCache(layer).get_or_build(make_spec(1), lambda: fake_cubin(make_spec(1)))
    layer.chmod(0o702)
    log = tmp_path / "builds.log"
    cache = KernelCache(cache_dir, readonly=(layer,))
    assert cache.get_or_build(make_spec(1), counting_build(make_spec(1), log)) == (fake_cubin(make_spec(1)), False)
    assert build_counts(log) == {make_spec(1).key: 1}
    layer.chmod(0o700)
    assert KernelCache(tmp_path / "other", readonly=(layer,)).get_or_build(
        make_spec(1), lambda: pytest.fail("rebuilt"))[1] is True


@pytest.mark.parametrize("kind", ["..", ".", ".hidden", "a/b", ""])
def test_record_kinds_that_leave_the_records_folder_are_refused(kind):
    with pytest.raises(ValueError, match=f"record kind {kind!r} is not allowed"):
        record_file_name(kind, "key")


def test_record_keys_become_safe_file_names():
    assert record_file_name("tuning", "plain-key_1.2") == "plain-key_1.2.json"
    for key in ("../evil", ".hidden", "a/b", "x" * 101):
        assert record_file_name("tuning", key) == hashlib.sha256(key.encode()).hexdigest() + ".json"


def _bundle_with_records(tmp_path, records: dict[tuple[str, str], bytes]):
    """A bundle holding only the given records ({(kind, file): data}), manifest sha256s correct."""
    import io
    import tarfile
    from cuopjit.cache.bundle import BUNDLE_FORMAT
    manifest = {"format": BUNDLE_FORMAT, "created": 0.0, "entries": [],
                "records": [{"kind": k, "file": f, "sha256": hashlib.sha256(d).hexdigest()}
                            for (k, f), d in records.items()]}
    path = tmp_path / "records.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in [("manifest.json", json.dumps(manifest).encode()),
                           *((f"records/{k}/{f}", d) for (k, f), d in records.items())]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_bundle_record_of_kind_dotdot_is_not_written_outside_records(tmp_path):
    good = json.dumps({"key": "k", "value": {"ms": 1.0}}).encode()
    path = _bundle_with_records(tmp_path, {("..", "evil.json"): b"{}", (".", "evil.json"): b"{}",
                                           ("tuning", "k.json"): good})
    target = tmp_path / "target"
    layer = Layer(target, writable=True)
    layer.ensure_dirs()
    result = import_bundle(layer, path)
    assert sorted(result.bad) == [("../evil.json", "not a record file name"), ("./evil.json", "not a record file name")]
    assert result.records == 1 and (target / "records" / "tuning" / "k.json").read_bytes() == good
    assert not (target / "evil.json").exists() and not (target / "records" / "evil.json").exists()


def _stale_temps(cache: KernelCache) -> list:
    """An entry temp file whose key lock is free and a record temp whose writer (pid) is gone."""
    spec = make_spec(7)
    entry_tmp = fsio.tmp_path(cache.layer.kernels / spec.file_name)
    entry_tmp.write_bytes(b"half")
    (cache.layer.records / "tuning").mkdir(parents=True, exist_ok=True)
    record_tmp = cache.layer.records / "tuning" / f".k.json{fsio.TMP_MARK}999999999.abcd"
    record_tmp.write_bytes(b"{")
    return [entry_tmp, record_tmp]


def test_verify_fix_counts_what_it_moved_and_removes_stale_temp_files(cache_dir):
    cache = KernelCache(cache_dir)
    for i in range(3):
        cache.get_or_build(make_spec(i), lambda i=i: fake_cubin(make_spec(i)))
    for i in (0, 1):
        path = cache.layer.entry_path(make_spec(i))
        path.write_bytes(path.read_bytes()[:-1] + b"!")
    stale = _stale_temps(cache)
    report = KernelCache(cache_dir).verify()
    assert (report.ok, len(report.bad), report.moved, report.temp_files_removed) == (1, 2, 0, 0)
    assert all(p.exists() for p in stale)
    report = KernelCache(cache_dir).verify(fix=True)
    assert (report.ok, len(report.bad), report.moved, report.temp_files_removed) == (1, 2, 2, 2)
    assert temp_files(cache_dir) == [] and len(list((cache_dir / "rejected").iterdir())) == 2
    assert KernelCache(cache_dir).stats().rejected == 2
    assert KernelCache(cache_dir).verify(fix=True).bad == []


def test_verify_fix_keeps_the_temp_file_of_a_live_writer(cache_dir):
    cache = KernelCache(cache_dir)
    spec = make_spec(1)
    cache.get_or_build(spec, lambda: fake_cubin(spec))
    tmp = fsio.tmp_path(cache.layer.kernels / spec.file_name)
    tmp.write_bytes(b"half")
    record_tmp = cache.layer.records / "tuning" / f".k.json{fsio.TMP_MARK}{os.getpid()}.abcd"
    record_tmp.parent.mkdir(parents=True, exist_ok=True)
    record_tmp.write_bytes(b"{")
    with cache.layer.key_lock(spec.file_name, 1.0):
        assert KernelCache(cache_dir).verify(fix=True).temp_files_removed == 0
    assert tmp.exists() and record_tmp.exists()
    assert KernelCache(cache_dir).verify(fix=True).temp_files_removed == 1 and not tmp.exists()


def test_clear_removes_entries_records_rejected_files_and_counters(cache_dir):
    cache = KernelCache(cache_dir)
    for i in range(2):
        cache.get_or_build(make_spec(i), lambda i=i: fake_cubin(make_spec(i)))
    cache.store_record("tuning", "gemm|64", {"config": "t64"})
    cache.store_record("other", "x", {"a": 1})
    bad = cache.layer.entry_path(make_spec(1))
    bad.write_bytes(b"junk")
    cache.verify(fix=True)
    stale = _stale_temps(cache)
    assert cache.clear() == 1
    fresh = KernelCache(cache_dir)
    assert fresh.load_record("tuning", "gemm|64") is None and fresh.load_record("other", "x") is None
    assert cache.load_record("tuning", "gemm|64") is None     # the clearing instance forgets it too
    assert [p for p in cache_dir.rglob("*") if p.is_file() and p.name != "prune.lock"
            and p.parent.name != "locks" and p.name != "stats.json"] == []
    assert not any(p.exists() for p in stale)
    stats = fresh.stats()
    assert (stats.entries, stats.compiles, stats.rejected, stats.misses) == (0, 0, 0, 0)


def test_clear_of_an_unwritable_cache_removes_nothing(tmp_path):
    cache = KernelCache(None)
    cache.get_or_build(make_spec(1), lambda: fake_cubin(make_spec(1)))
    cache.store_record("tuning", "k", {"a": 1})
    assert cache.clear() == 0 and cache.load_record("tuning", "k") is None
    assert stat.S_ISDIR(os.stat(tmp_path).st_mode)


def test_invalidate_in_a_fresh_instance_moves_the_disk_entry_aside(cache_dir, tmp_path, caplog):
    """The driver may reject a cubin another KernelCache instance stored: nothing of it is in this one's memory."""
    import logging
    spec, log = make_spec(3), tmp_path / "builds.log"
    KernelCache(cache_dir).get_or_build(spec, lambda: fake_cubin(spec))
    fresh = KernelCache(cache_dir)
    with caplog.at_level(logging.WARNING, logger="cuopjit"):
        fresh.invalidate(spec, "CUDA_ERROR_INVALID_IMAGE")
    assert f"cache: rejected {fresh.layer.entry_path(spec)} (the driver rejected it: CUDA_ERROR_INVALID_IMAGE); " \
           f"moved to {cache_dir}/rejected/{spec.file_name}.driver." in caplog.text
    assert not fresh.layer.entry_path(spec).exists() and fresh.load_record("invalidated", spec.key) is None
    assert not (cache_dir / "records" / "invalidated").exists()      # a writable entry needs no tombstone
    assert fresh.get_or_build(spec, counting_build(spec, log)) == (fake_cubin(spec), False)
    assert build_counts(log) == {spec.key: 1} and fresh.stats().rejected == 1


def test_invalidating_a_readonly_entry_leaves_a_tombstone_naming_the_layer(cache_dir, tmp_path):
    ro, spec = tmp_path / "ro", make_spec(4)
    KernelCache(ro).get_or_build(spec, lambda: fake_cubin(spec))
    cache = KernelCache(cache_dir, readonly=(ro,))
    assert cache.get_or_build(spec, lambda: pytest.fail("rebuilt"))[1] is True
    cache.invalidate(spec, "CUDA_ERROR_NO_BINARY_FOR_GPU")
    record = {"reason": "CUDA_ERROR_NO_BINARY_FOR_GPU", "layer": str(ro)}
    assert cache.load_record("invalidated", spec.key) == record
    assert KernelCache(cache_dir).load_record("invalidated", spec.key) == record
    assert (ro / "kernels" / spec.file_name).exists()


def test_invalidate_in_a_memory_only_cache_warns_and_counts_each_kernel(caplog):
    import logging
    cache = KernelCache(None)
    specs = [make_spec(1), make_spec(2)]
    for spec in specs:
        cache.get_or_build(spec, lambda spec=spec: fake_cubin(spec))
    with caplog.at_level(logging.WARNING, logger="cuopjit"):
        for spec in specs:
            cache.invalidate(spec, "CUDA_ERROR_INVALID_IMAGE")
        cache.invalidate(make_spec(9), "CUDA_ERROR_INVALID_IMAGE")   # never built here: still counted
    for spec in specs + [make_spec(9)]:
        assert f"cache: the driver rejected {spec.name} (CUDA_ERROR_INVALID_IMAGE); rebuilding" in caplog.text
    assert cache.stats().rejected == 3
    assert cache.get_or_build(specs[0], lambda: fake_cubin(specs[0])) == (fake_cubin(specs[0]), False)


def test_clear_keeps_the_prune_lock_and_removes_idle_key_locks(cache_dir):
    cache = KernelCache(cache_dir)
    cache.get_or_build(make_spec(1), lambda: fake_cubin(make_spec(1)))
    cache.prune(1 << 30)                                  # creates locks/prune.lock
    idle = cache.layer.lock_path(make_spec(1).file_name)
    idle.parent.mkdir(parents=True, exist_ok=True)
    idle.touch()
    assert (cache_dir / "locks" / "prune.lock").exists()
    assert cache.clear() == 1
    assert sorted(p.name for p in (cache_dir / "locks").iterdir()) == ["prune.lock"]


def test_clear_resets_the_counters_and_marks_the_size_unknown(cache_dir):
    from cuopjit.cache.stats import StatsFile
    cache = KernelCache(cache_dir)
    for i in range(2):
        cache.get_or_build(make_spec(i), lambda i=i: fake_cubin(make_spec(i)))
    assert StatsFile(cache.layer.stats_path).read()["approx_bytes"] > 2 * 4096
    cache.clear()
    totals = StatsFile(cache.layer.stats_path).read()
    assert totals == {"hits": 0, "misses": 0, "compiles": 0, "compile_seconds": 0, "evictions": 0, "rejected": 0,
                      "approx_bytes": -1}


def test_clear_counts_only_the_entries_it_removed(cache_dir, monkeypatch):
    from cuopjit.cache import maintain
    cache = KernelCache(cache_dir)
    for i in range(2):
        cache.get_or_build(make_spec(i), lambda i=i: fake_cubin(make_spec(i)))
    files = cache.layer.scan()
    vanished = files[0]
    vanished.path.unlink()                                  # another process removed it after the scan
    monkeypatch.setattr(cache.layer, "scan", lambda: files)
    assert maintain.clear(cache.layer) == 1


def test_import_replaces_a_corrupt_entry_instead_of_skipping_it(tmp_path):
    source = KernelCache(tmp_path / "source")
    specs = [make_spec(i) for i in range(2)]
    for s in specs:
        source.get_or_build(s, lambda s=s: fake_cubin(s))
    bundle = tmp_path / "k.tar.gz"
    source.export_bundle(bundle)
    target = KernelCache(tmp_path / "target")
    target.get_or_build(specs[0], lambda: fake_cubin(specs[0]))
    target.get_or_build(specs[1], lambda: fake_cubin(specs[1]))
    target.layer.entry_path(specs[1]).write_bytes(b"corrupt")
    result = target.import_bundle(bundle)
    assert (result.entries, result.skipped, result.bad) == (1, 1, [])
    assert KernelCache(tmp_path / "target").get_or_build(specs[1], lambda: pytest.fail("rebuilt"))[1] is True
