"""Entry format and integrity: every corruption is detected, moved aside, counted, logged once and rebuilt."""
from __future__ import annotations

import logging
import random
import struct

import pytest

from cache_fakes import build_counts, counting_build, fake_cubin, make_spec
from cuopjit.cache import EntryError, EntrySpec, KernelCache, entry as entry_format, get_cache

PREFIX = struct.Struct("<8sII32s")


def _populate(root, n=2):
    """A cache holding n entries; returns their specs."""
    cache = KernelCache(root)
    specs = [make_spec(i) for i in range(n)]
    for s in specs:
        cache.get_or_build(s, lambda s=s: fake_cubin(s))
    return specs


def _payload_offset(data: bytes) -> int:
    return PREFIX.size + PREFIX.unpack_from(data)[2]


def test_entry_round_trip_and_header_fields():
    spec = make_spec(3)
    data = entry_format.encode(spec, b"cubin-bytes")
    found = entry_format.decode(data)
    assert found.payload == b"cubin-bytes"
    assert found.key == spec.key and found.arch == "sm_90" and found.name == spec.name
    h = found.header
    assert h["template"] == "fake.cu.jinja" and h["params"] == [["i", "3"]]
    assert h["options"] == ["--gpu-architecture=sm_90"] and h["nvrtc_version"] == "13.5"
    assert h["cuopjit_version"] and len(h["payload_sha256"]) == 64
    entry_format.check_matches(found, spec)


def test_key_covers_source_options_arch_and_nvrtc_version():
    base = make_spec(0)
    variants = [
        EntrySpec(base.name, base.source + " ", base.options, base.arch, base.nvrtc_version, base.template),
        EntrySpec(base.name, base.source, base.options + ("-lineinfo",), base.arch, base.nvrtc_version, base.template),
        EntrySpec(base.name, base.source, base.options, "sm_90a", base.nvrtc_version, base.template),
        EntrySpec(base.name, base.source, base.options, base.arch, "13.6", base.template),
    ]
    assert len({base.key, *(v.key for v in variants)}) == 5
    assert base.file_name == f"fake_k0_sm90-{base.key[:16]}.cubin"


def test_spec_rejects_unsafe_name_and_bad_arch():
    with pytest.raises(ValueError, match="EntrySpec name '../x' is not allowed"):
        EntrySpec("../x", "", (), "sm_90", "13.5", "t")
    with pytest.raises(ValueError, match="EntrySpec arch 'compute_90' is not allowed"):
        EntrySpec("x", "", (), "compute_90", "13.5", "t")


def test_every_single_bit_flip_is_detected():
    data = entry_format.encode(make_spec(1), fake_cubin(make_spec(1), 512))
    rng = random.Random(1234)
    positions = list(range(PREFIX.size + 8)) + rng.sample(range(len(data)), 200) + [len(data) - 1]
    for pos in positions:
        bad = bytearray(data)
        bad[pos] ^= 1 << rng.randrange(8)
        with pytest.raises(EntryError):
            entry_format.decode(bytes(bad))


def _truncate(paths):
    data = paths[0].read_bytes()
    paths[0].write_bytes(data[: len(data) // 2])


def _zero(paths):
    paths[0].write_bytes(b"")


def _flip(paths):
    data = bytearray(paths[0].read_bytes())
    data[-100] ^= 0x10
    paths[0].write_bytes(bytes(data))


def _swap_payloads(paths):
    a, b = paths[0].read_bytes(), paths[1].read_bytes()
    oa, ob = _payload_offset(a), _payload_offset(b)
    paths[0].write_bytes(a[:oa] + b[ob:])
    paths[1].write_bytes(b[:ob] + a[oa:])


def _swap_files(paths):
    a, b = paths[0].read_bytes(), paths[1].read_bytes()
    paths[0].write_bytes(b)
    paths[1].write_bytes(a)


def _other_arch(paths):
    other = make_spec(0, arch="sm_80")
    paths[0].write_bytes(entry_format.encode(other, fake_cubin(other)))


def _old_format(paths):
    data = bytearray(paths[0].read_bytes())
    struct.pack_into("<I", data, 8, entry_format.FORMAT_VERSION + 1)
    paths[0].write_bytes(bytes(data))


CORRUPTIONS = {"truncated": (_truncate, "truncated"), "zero-length": (_zero, "truncated"),
               "bit-flip": (_flip, "checksum"), "payload-swap": (_swap_payloads, "checksum"),
               "file-swap": (_swap_files, "key"), "other-arch": (_other_arch, "arch"),
               "format-version": (_old_format, "format")}


@pytest.mark.parametrize("kind", CORRUPTIONS)
def test_corrupt_entry_is_rejected_moved_aside_counted_and_rebuilt(kind, cache_dir, tmp_path, caplog):
    corrupt, reason = CORRUPTIONS[kind]
    specs = _populate(cache_dir)
    cache = KernelCache(cache_dir)
    paths = [cache.layer.entry_path(s) for s in specs]
    corrupt(paths)
    log = tmp_path / "builds.log"
    with caplog.at_level(logging.WARNING, logger="cuopjit"):
        cubin, hit = cache.get_or_build(specs[0], counting_build(specs[0], log))
    assert (cubin, hit) == (fake_cubin(specs[0]), False)
    assert build_counts(log)[specs[0].key] == 1
    assert cache.stats().rejected == 1
    rejected = list((cache_dir / "rejected").iterdir())
    assert [p.name.split(".")[-2] for p in rejected] == [reason]
    assert f"cache: rejected {paths[0]} ({reason}:" in caplog.text
    assert "the kernel is rebuilt" in caplog.text
    again = KernelCache(cache_dir)
    assert again.get_or_build(specs[0], counting_build(specs[0], log)) == (fake_cubin(specs[0]), True)
    assert build_counts(log)[specs[0].key] == 1


def test_rejection_warns_once_per_file(cache_dir, caplog):
    spec = _populate(cache_dir, 1)[0]
    path = KernelCache(cache_dir).layer.entry_path(spec)
    with caplog.at_level(logging.WARNING, logger="cuopjit"):
        for _ in range(3):
            path.write_bytes(b"garbage")
            assert KernelCache(cache_dir).get_or_build(spec, lambda: fake_cubin(spec))[1] is False
    assert caplog.text.count(f"cache: rejected {path}") == 1
    assert KernelCache(cache_dir).stats().rejected == 3


def test_debug_log_names_hits_misses_compiles_and_rejections(cache_dir, caplog):
    spec = make_spec(7)
    with caplog.at_level(logging.DEBUG, logger="cuopjit"):
        KernelCache(cache_dir).get_or_build(spec, lambda: fake_cubin(spec))
        KernelCache(cache_dir).get_or_build(spec, lambda: fake_cubin(spec))
        KernelCache(cache_dir).layer.entry_path(spec).write_bytes(b"x")
        KernelCache(cache_dir).get_or_build(spec, lambda: fake_cubin(spec))
    for event in ("cache miss", "cache compile", "cache hit", "cache reject"):
        assert f"{event} {spec.name}" in caplog.text or f"{event} {spec.file_name}" in caplog.text, event


def test_memory_hit_does_not_touch_disk(cache_dir, monkeypatch):
    spec = make_spec(1)
    cache = KernelCache(cache_dir)
    cache.get_or_build(spec, lambda: fake_cubin(spec))
    monkeypatch.setattr("cuopjit.cache.fsio.read_bytes", lambda *_: pytest.fail("disk read on a memory hit"))
    assert cache.get_or_build(spec, lambda: pytest.fail("rebuilt")) == (fake_cubin(spec), True)
    assert cache.stats().memory_hits == 1


def test_stats_persist_across_cache_instances(cache_dir):
    specs = _populate(cache_dir, 3)
    cache = KernelCache(cache_dir)
    for s in specs:
        cache.get_or_build(s, lambda: pytest.fail("rebuilt"))
    s = KernelCache(cache_dir).stats()
    assert (s.entries, s.hits, s.misses, s.compiles, s.rejected) == (3, 3, 3, 3, 0)
    assert s.bytes > 3 * 4096 and s.compile_seconds >= 0


def test_records_round_trip_and_survive_processes(cache_dir):
    cache = KernelCache(cache_dir)
    key = "gemm|1024x1024x1024|float32|NVIDIA H100|132|sm_90|13.0"
    assert cache.load_record("tuning", key) is None
    cache.store_record("tuning", key, {"config": "t128", "ms": 0.25})
    assert KernelCache(cache_dir).load_record("tuning", key) == {"config": "t128", "ms": 0.25}
    with pytest.raises(ValueError, match="record kind '../x' is not allowed"):
        cache.store_record("../x", "k", {})


def test_get_cache_memoises_per_directory_and_honours_enable_caching(cache_dir, tmp_path, monkeypatch):
    import cuopjit.cache
    from cuopjit.config import get_default_global_jit_config
    monkeypatch.setattr(cuopjit.cache, "_caches", {})   # no memory-only cache left by an earlier run in this process
    assert get_cache() is get_cache(cache_dir)
    assert get_cache(tmp_path / "other") is not get_cache()
    config = get_default_global_jit_config()
    config.enable_caching = False
    try:
        memory = get_cache()
        spec = make_spec(5)
        assert memory.directory is None and not memory.writable
        assert memory.get_or_build(spec, lambda: fake_cubin(spec)) == (fake_cubin(spec), False)
        assert memory.get_or_build(spec, lambda: pytest.fail("rebuilt")) == (fake_cubin(spec), True)
        assert not cache_dir.exists()
    finally:
        config.enable_caching = True


def test_failed_build_stores_nothing_and_the_next_lookup_retries(cache_dir):
    from cuopjit.errors import CompileError
    spec = make_spec(4)
    cache = KernelCache(cache_dir)

    def broken() -> bytes:
        raise CompileError("NVRTC could not compile fake_k4_sm90")
    with pytest.raises(CompileError, match="could not compile fake_k4_sm90"):
        cache.get_or_build(spec, broken)
    assert not cache.layer.entry_path(spec).exists()
    assert cache.get_or_build(spec, lambda: fake_cubin(spec)) == (fake_cubin(spec), False)


def test_threads_of_one_process_compile_a_key_once(cache_dir, tmp_path):
    from concurrent.futures import ThreadPoolExecutor
    log, cache = tmp_path / "builds.log", KernelCache(cache_dir)
    specs = [make_spec(i % 3) for i in range(24)]
    with ThreadPoolExecutor(8) as pool:
        out = list(pool.map(lambda s: cache.get_or_build(s, counting_build(s, log, delay=0.01))[0], specs))
    assert out == [fake_cubin(s) for s in specs]
    assert sorted(build_counts(log).values()) == [1, 1, 1]
