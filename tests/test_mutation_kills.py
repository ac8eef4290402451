"""Tests written against mutants that survived `mutmut run` (README: Mutation testing): each pins a behaviour
of the cache, the CLI or the compiler that a one-line change used to get past unnoticed. CPU only."""
from __future__ import annotations

import datetime
import errno
import json
import logging
import importlib
import os

import pytest

from cache_fakes import fake_cubin, fill_disk, make_spec
from cuopjit.build import codegen, compiler
from cuopjit.cache import KernelCache, fsio
from cuopjit.cache.layer import Layer
from cuopjit.cache.stats import COUNTERS
from cuopjit.cli.main import main


def _cli(capsys, *argv) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture
def filled(cache_dir):
    cache = KernelCache(cache_dir)
    for i in range(2):
        cache.get_or_build(make_spec(i), lambda i=i: fake_cubin(make_spec(i)))
    return cache


# --- cuopjit cache ... ---------------------------------------------------------------------------------------
def test_cache_stats_text_and_json(filled, cache_dir, capsys):
    rc, out, _ = _cli(capsys, "cache", "stats", "--cache-dir", str(cache_dir))
    lines = dict(line.split(None, 1) for line in out.splitlines())
    assert rc == 0 and set(COUNTERS) <= set(lines) and "memory_hits" not in lines
    assert (lines["entries"], lines["compiles"], lines["misses"], lines["hits"]) == ("2", "2", "2", "0")
    assert lines["compile_seconds"].count(".") == 1 and len(lines["compile_seconds"].split(".")[1]) == 2
    assert lines["bytes"].endswith(" KiB") and lines["writable"] == "True"
    assert out.splitlines()[0] == f"{'entries':<16} 2"
    rc, out, _ = _cli(capsys, "cache", "stats", "--json", "--cache-dir", str(cache_dir))
    s = json.loads(out)
    assert rc == 0 and out.startswith('{\n "entries": 2,\n') and "memory_hits" not in s
    assert (s["entries"], s["compiles"], s["writable"], s["directory"]) == (2, 2, True, str(cache_dir))


def test_cache_ls_line_format(filled, cache_dir, capsys):
    stamp = datetime.datetime(2026, 1, 2, 3, 4).timestamp()
    for i in range(2):
        os.utime(filled.layer.entry_path(make_spec(i)), (stamp, stamp + i * 60))
    rc, out, _ = _cli(capsys, "cache", "ls", "--cache-dir", str(cache_dir))
    size = filled.layer.entry_path(make_spec(1)).stat().st_size
    assert rc == 0 and out.splitlines() == [
        f"{'fake_k1_sm90':<40} {'sm_90':<7} {f'{size / 1024:.1f} KiB':>10}  2026-01-02 03:05  fake.cu.jinja i=1",
        f"{'fake_k0_sm90':<40} {'sm_90':<7} {f'{size / 1024:.1f} KiB':>10}  2026-01-02 03:04  fake.cu.jinja i=0",
        "2 entries"]


@pytest.mark.parametrize("command, verb", [(["clear"], "cleared"), (["prune", "--max-size", "1M"], "pruned"),
                                           (["import", "k.tar.gz"], "imported")])
def test_commands_that_change_the_cache_refuse_an_unwritable_one(filled, cache_dir, tmp_path, capsys, monkeypatch,
                                                                 command, verb):
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: not mode & os.W_OK and real_access(p, mode, **kw))
    other = tmp_path / "other"
    KernelCache(other).get_or_build(make_spec(5), lambda: fake_cubin(make_spec(5)))
    if command[0] == "import":
        command = ["import", str(tmp_path / "k.tar.gz")]
    rc, out, err = _cli(capsys, "cache", *command, "--cache-dir", str(other))
    assert (rc, out) == (1, "")
    assert err.startswith(f"cuopjit cache: error: nothing can be {verb}: {other} ")


def test_cache_export_reports_the_entries_it_skipped(filled, cache_dir, tmp_path, capsys):
    bad = filled.layer.entry_path(make_spec(1))
    bad.write_bytes(b"junk")
    rc, out, err = _cli(capsys, "cache", "export", str(tmp_path / "k.tar.gz"), "--cache-dir", str(cache_dir))
    assert rc == 0 and out == f"exported 1 entries and 0 records to {tmp_path / 'k.tar.gz'}\n"
    assert err.startswith(f"skipped bad entry {bad}: ") and err.count("\n") == 1


def test_show_and_info_in_process(capsys):
    rc, out, _ = _cli(capsys, "show", "relu", "--dtype", "float32")
    assert rc == 0 and out.startswith("// relu_f32") and 'extern "C" __global__' in out and "#line" in out
    rc, out, _ = _cli(capsys, "info")
    assert rc == 0 and "nvrtc_targets: sm_80" in out


# --- the compiler's error excerpt and the template list -----------------------------------------------------
def test_compile_error_excerpt_shows_three_lines_either_side():
    lines = [f"line {i}" for i in range(1, 41)]
    excerpt = compiler._excerpt('"x.cu.jinja"(20): error: boom', lambda name: lines)
    assert excerpt == ("\nx.cu.jinja, lines 17-23:\n" + "\n".join(
        f"{'>' if n == 20 else ' '} {n:5d} | line {n}" for n in range(17, 24)))
    assert compiler._excerpt("x.cu.jinja(39): catastrophic error: x", lambda name: lines).startswith(
        "\nx.cu.jinja, lines 36-40:\n")
    assert compiler._excerpt("x.cu.jinja(2): error: x", lambda name: lines).startswith("\nx.cu.jinja, lines 1-5:\n")
    assert compiler._excerpt("no location here", lambda name: lines) == ""


def test_template_names_and_lines():
    names = codegen.template_names()
    assert "gemm/gemm.cu.jinja" in names and "common/common.cuh.jinja" not in names and names == sorted(names)
    assert codegen.template_lines("common/common.cuh.jinja")[1] == "typedef {{ scalar_t }} scalar_t;"


# --- plan keys of a GEMM's weight ---------------------------------------------------------------------------
def test_a_gemm_weight_of_another_shape_or_alignment_re_keys_the_plans():
    import cuopjit
    from test_checks import fake
    g = cuopjit.GemmFloat()
    states = []
    for shape, ptr in (((8, 12), 1 << 20), ((8, 16), 1 << 20), ((8, 16), (1 << 20) + 4), ((8, 16), (1 << 20) + 8),
                       ((8, 16), (1 << 20) + 16)):
        g.set_weight(fake(shape, ptr=ptr))
        states.append(g._state)
    assert len(set(states[:4])) == 4 and states[4] == states[1]   # 16 bytes further: the same alignment


# --- layers, records, temp files ------------------------------------------------------------------------------
def test_records_that_are_not_a_dict_for_this_key_read_as_absent(cache_dir):
    cache = KernelCache(cache_dir)
    cache.store_record("tuning", "k", {"ms": 1.0})
    path = cache.layer.record_path("tuning", "k")
    assert json.loads(path.read_text()) == {"key": "k", "value": {"ms": 1.0}}
    for doc in ('{"key": "other", "value": {"ms": 1.0}}', '{"key": "k", "value": [1]}', '[1, 2]', '{"key": "k"}',
                'not json', '"just a string"'):
        path.write_text(doc)
        assert KernelCache(cache_dir).load_record("tuning", "k") is None, doc


def test_records_are_written_with_sorted_keys(cache_dir):
    cache = KernelCache(cache_dir)
    cache.store_record("tuning", "k", {"b": 1, "a": 2})
    assert cache.layer.record_path("tuning", "k").read_text() == '{"key": "k", "value": {"a": 2, "b": 1}}'


def test_loaded_records_are_memoised_and_stored_ones_kept_in_memory(cache_dir):
    cache = KernelCache(cache_dir)
    cache.store_record("tuning", "k", {"ms": 1.0})
    reader = KernelCache(cache_dir)
    assert reader.load_record("tuning", "k") == {"ms": 1.0}
    reader.layer.record_path("tuning", "k").unlink()
    assert reader.load_record("tuning", "k") == {"ms": 1.0}          # from memory, not disk
    memory = KernelCache(None)
    memory.store_record("tuning", "k", {"ms": 2.0})
    assert memory.load_record("tuning", "k") == {"ms": 2.0}


def test_a_record_in_an_untrusted_layer_is_skipped_for_the_next_layer(cache_dir, tmp_path, caplog):
    first, second = tmp_path / "first", tmp_path / "second"
    KernelCache(first).store_record("tuning", "k", {"from": "first"})
    KernelCache(second).store_record("tuning", "k", {"from": "second"})
    record = first / "records" / "tuning" / "k.json"
    record.chmod(0o666)
    cache = KernelCache(cache_dir, readonly=(first, second))
    with caplog.at_level(logging.WARNING, logger="cuopjit"):
        assert cache.load_record("tuning", "k") == {"from": "second"}
        assert KernelCache(cache_dir, readonly=(first, second)).load_record("tuning", "k") == {"from": "second"}
    assert caplog.text.count("cuopjit will not load it") == 1
    assert f"cache: {record} is writable by other users (mode 666)" in caplog.text


def test_export_of_a_layer_without_records(cache_dir, tmp_path):
    cache = KernelCache(cache_dir)
    cache.get_or_build(make_spec(1), lambda: fake_cubin(make_spec(1)))
    if (cache_dir / "records").exists():
        os.rmdir(cache_dir / "records")
    result = cache.export_bundle(tmp_path / "k.tar.gz")
    assert (result.entries, result.records, result.bad) == (1, 0, [])


def test_a_bundle_counts_every_record_and_names_a_misnamed_entry(tmp_path):
    import tarfile
    source = KernelCache(tmp_path / "source")
    for key in ("a", "b", "c"):
        source.store_record("tuning", key, {"k": key})
    source.get_or_build(make_spec(1), lambda: fake_cubin(make_spec(1)))
    bundle = tmp_path / "k.tar.gz"
    source.export_bundle(bundle)
    assert KernelCache(tmp_path / "target").import_bundle(bundle).records == 3
    with tarfile.open(bundle) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    import hashlib
    import io
    other = make_spec(2)
    name = f"kernels/{make_spec(1).file_name}"
    from cuopjit.cache import entry
    members[name] = entry.encode(other, fake_cubin(other))
    manifest = json.loads(members["manifest.json"])
    for item in manifest["entries"]:
        item["sha256"] = hashlib.sha256(members[name]).hexdigest()
    members["manifest.json"] = json.dumps(manifest).encode()
    with tarfile.open(bundle, "w:gz") as tar:
        for n, data in members.items():
            info = tarfile.TarInfo(n)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    result = KernelCache(tmp_path / "fresh").import_bundle(bundle)
    assert result.bad == [(make_spec(1).file_name, f"name: member holds {other.file_name}")]


def test_writer_alive_reads_the_pid_after_the_last_mark():
    dead = 2 ** 22 + 12345       # above pid_max's default: no such process
    assert fsio.writer_alive(f".a{fsio.TMP_MARK}b.json{fsio.TMP_MARK}{dead}.ab12") is False
    assert fsio.writer_alive(f".a{fsio.TMP_MARK}b.json{fsio.TMP_MARK}{os.getpid()}.ab12") is True
    assert fsio.writer_alive(f".k.json{fsio.TMP_MARK}notapid.ab12") is True     # unknown: assume alive
    assert fsio.writer_alive(".k.json") is True


def test_a_full_disk_turns_the_layer_memory_only_and_stops_writing(cache_dir, monkeypatch, caplog):
    cache = KernelCache(cache_dir)
    cache.get_or_build(make_spec(0), lambda: fake_cubin(make_spec(0)))
    fill_disk(monkeypatch)
    writes = []
    real_store = cache.layer.store
    monkeypatch.setattr(cache.layer, "store", lambda *a: writes.append(a) or real_store(*a))
    with caplog.at_level(logging.WARNING, logger="cuopjit"):
        for i in (1, 2):
            assert cache.get_or_build(make_spec(i), lambda i=i: fake_cubin(make_spec(i)))[1] is False
    assert len(writes) == 1 and cache.layer.writable is False and not cache.writable
    assert caplog.text.count(f"{cache_dir} is not writable (No space left on device)") == 1


def test_other_write_errors_warn_once_per_directory(tmp_path, monkeypatch, caplog):
    caches = [KernelCache(tmp_path / "a"), KernelCache(tmp_path / "b")]

    def broken(*args):
        raise OSError(errno.EIO, os.strerror(errno.EIO))
    with caplog.at_level(logging.WARNING, logger="cuopjit"):
        for cache in caches:
            monkeypatch.setattr(cache.layer, "store", broken)
            monkeypatch.setattr(cache.layer, "write_record", broken)
            for i in (1, 2):
                assert cache.get_or_build(make_spec(i), lambda i=i: fake_cubin(make_spec(i))) == (
                    fake_cubin(make_spec(i)), False)
            cache.store_record("tuning", "k", {"a": 1})
            assert cache.writable                # EIO is not "this disk takes no writes"
    for cache in caches:
        assert caplog.text.count(f"cache: could not store in {cache.directory} ([Errno 5] "
                                 "Input/output error); the kernel stays in memory for this process") == 1


def test_a_hit_survives_a_layer_whose_mtimes_cannot_be_set(filled, cache_dir, monkeypatch):
    def readonly(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))
    monkeypatch.setattr(os, "utime", readonly)
    assert KernelCache(cache_dir).get_or_build(make_spec(1), lambda: pytest.fail("rebuilt"))[1] is True


def test_rejections_name_each_file_and_whether_it_was_moved(cache_dir, tmp_path, caplog):
    ro = tmp_path / "ro"
    for i in (1, 2):
        KernelCache(ro).get_or_build(make_spec(i), lambda i=i: fake_cubin(make_spec(i)))
        path = ro / "kernels" / make_spec(i).file_name
        path.write_bytes(path.read_bytes()[:-1] + b"!")
    cache = KernelCache(cache_dir, readonly=(ro,))
    with caplog.at_level(logging.DEBUG, logger="cuopjit"):
        for i in (1, 2):
            assert cache.get_or_build(make_spec(i), lambda i=i: fake_cubin(make_spec(i)))[1] is False
    for i in (1, 2):
        path = ro / "kernels" / make_spec(i).file_name
        assert (f"cache: rejected {path} (checksum: payload sha256 does not match the header); left in place; "
                "the kernel is rebuilt") in caplog.text
        assert f"cache reject {path.name}: checksum: payload sha256 does not match the header" in caplog.text


def test_contains_and_layer_repr(cache_dir):
    cache = KernelCache(cache_dir)
    assert not cache.contains(make_spec(1))
    cache.get_or_build(make_spec(1), lambda: fake_cubin(make_spec(1)))
    assert cache.contains(make_spec(1)) and KernelCache(cache_dir).contains(make_spec(1))
    assert not KernelCache(cache_dir).contains(make_spec(2))
    assert repr(Layer(cache_dir, writable=False)) == f"Layer({str(cache_dir)!r}, writable=False)"


# --- listings, verify --fix, temp files ------------------------------------------------------------------------
def test_entries_describe_each_file_newest_first(cache_dir, tmp_path):
    from cuopjit import __version__
    cache = KernelCache(cache_dir)
    for i in range(3):
        cache.get_or_build(make_spec(i), lambda i=i: fake_cubin(make_spec(i)))
        os.utime(cache.layer.entry_path(make_spec(i)), (1e9 + i, 1e9 + i))
    (cache_dir / "kernels" / "junk-0123456789abcdef.cubin").write_bytes(b"junk")
    bad_ro = tmp_path / "ro"
    KernelCache(bad_ro).get_or_build(make_spec(7), lambda: fake_cubin(make_spec(7)))
    bad_ro.chmod(0o777)                                   # untrusted: not listed
    got = KernelCache(cache_dir, readonly=(bad_ro,)).entries()
    assert [e.name for e in got] == ["fake_k2_sm90", "fake_k1_sm90", "fake_k0_sm90"]
    e = got[0]
    path = cache.layer.entry_path(make_spec(2))
    assert (e.key, e.arch, e.template, e.params, e.nvrtc_version, e.cuopjit_version, e.size, e.mtime, e.path,
            e.writable) == (make_spec(2).key, "sm_90", "fake.cu.jinja", (("i", "2"),), "13.5", __version__,
                            path.stat().st_size, 1e9 + 2, str(path), True)


def test_verify_fix_names_each_reason_in_the_rejected_file(cache_dir, tmp_path):
    cache = KernelCache(cache_dir)
    for i in range(3):
        cache.get_or_build(make_spec(i), lambda i=i: fake_cubin(make_spec(i)))
    checksum = cache.layer.entry_path(make_spec(0))
    checksum.write_bytes(checksum.read_bytes()[:-1] + b"!")
    untrusted = cache.layer.entry_path(make_spec(1))
    untrusted.chmod(0o666)
    unreadable = cache_dir / "kernels" / "dir-0123456789abcdef.cubin"
    unreadable.mkdir()
    ro = tmp_path / "ro"
    KernelCache(ro).get_or_build(make_spec(5), lambda: fake_cubin(make_spec(5)))
    ro.chmod(0o777)
    report = KernelCache(cache_dir, readonly=(ro,)).verify(fix=True)
    bad = dict(report.bad)
    assert report.ok == 1 and report.moved == 3
    assert bad[str(ro)] == f"{ro} is writable by other users (mode 777), so cuopjit will not load it; fix it with: " \
                           f"chmod go-w {ro}"
    assert bad[str(checksum)] == "checksum: payload sha256 does not match the header"
    assert "is writable by other users (mode 666)" in bad[str(untrusted)]
    assert bad[str(unreadable)] == "unreadable: Is a directory"
    reasons = sorted(p.name.split(".")[-2] for p in (cache_dir / "rejected").iterdir())
    assert reasons == ["checksum", "unreadable", "untrusted"]


def test_idle_temp_files_of_every_target_are_removed_and_a_live_writers_kept(cache_dir):
    cache = KernelCache(cache_dir)
    specs = [make_spec(i) for i in range(3)]
    for s in specs:
        cache.get_or_build(s, lambda s=s: fake_cubin(s))
    stale = [fsio.tmp_path(cache.layer.kernels / s.file_name) for s in specs]
    for t in stale:
        t.write_bytes(b"half")
    keep = cache_dir / "kernels" / ".keep"
    keep.write_bytes(b"")
    with cache.layer.key_lock(specs[2].file_name, 1.0):
        assert KernelCache(cache_dir).verify(fix=True).temp_files_removed == 2
    assert [t.exists() for t in stale] == [False, False, True] and keep.exists()


def test_verify_and_remove_idle_tmps_of_an_empty_directory(tmp_path):
    from cuopjit.cache import maintain
    layer = Layer(tmp_path / "nothing", writable=True)
    assert maintain.remove_idle_tmps(layer) == 0
    report = KernelCache(tmp_path / "nothing").verify(fix=True)
    assert (report.ok, report.bad, report.moved, report.temp_files_removed) == (0, [], 0, 0)


# --- entries, bundles: the exact reasons -----------------------------------------------------------------------
def test_mismatch_and_truncation_messages():
    from cuopjit.cache import entry
    from cuopjit.cache.entry import EntryError
    spec, other = make_spec(1), make_spec(2)
    found = entry.decode(entry.encode(other, fake_cubin(other)))
    with pytest.raises(EntryError, match=rf"^key: entry has key {other.key[:16]}…, wanted {spec.key[:16]}…$"):
        entry.check_matches(found, spec)


def test_peek_header_of_a_short_file(tmp_path):
    from cuopjit.cache import entry
    from cuopjit.cache.entry import EntryError
    short = tmp_path / "short.cubin"
    short.write_bytes(b"CUOPJIT")
    with pytest.raises(EntryError, match=rf"^truncated: 7 bytes is shorter than the {entry._PREFIX.size}-byte "
                                         r"prefix$") as info:
        entry.peek_header(str(short))
    assert info.value.reason == "truncated"


def _tar(path, members: dict) -> None:
    import io
    import tarfile
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize("manifest, why", [
    ([], "manifest.json is not of format cuopjit-bundle-1"),
    ({"format": "cuopjit-bundle-1", "entries": [1] * 30}, "manifest.json: 'entries' must be a list of objects, not "
                                                         "[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, "),
])
def test_a_bad_manifest_names_the_bundle_and_the_reason(tmp_path, manifest, why):
    from cuopjit.cache.bundle import BundleError
    path = tmp_path / "b.tar.gz"
    _tar(path, {"manifest.json": json.dumps(manifest).encode()})
    with pytest.raises(BundleError) as info:
        KernelCache(tmp_path / "t").import_bundle(path)
    assert str(info.value) == f"{path} is not a readable cuopjit bundle ({why}); make one with `cuopjit cache export`"


def test_manifest_items_missing_parts_or_members(tmp_path):
    from cuopjit.cache.bundle import BUNDLE_FORMAT
    path = tmp_path / "b.tar.gz"
    manifest = {"format": BUNDLE_FORMAT, "entries": [{"file": "k-0123456789abcdef.cubin", "sha256": "0" * 64}],
                "records": [{"file": "x.json", "sha256": "0" * 64}]}
    del manifest["records"][0]["sha256"]
    _tar(path, {"manifest.json": json.dumps(manifest).encode()})
    result = KernelCache(tmp_path / "t").import_bundle(path)
    assert sorted(result.bad) == [("/x.json", "not a record file name"),
                                  ("kernels/k-0123456789abcdef.cubin", "missing from the bundle, or not a regular file")]
    _tar(path, {"manifest.json": json.dumps({"format": BUNDLE_FORMAT, "entries": []}).encode()})
    assert KernelCache(tmp_path / "t").import_bundle(path).bad == []     # "records" may be left out


def test_import_into_a_memory_only_cache_says_why(tmp_path):
    from cuopjit.cache.access import FIX
    from cuopjit.cache.bundle import BundleError
    with pytest.raises(BundleError) as info:
        KernelCache(None).import_bundle(tmp_path / "k.tar.gz")
    assert str(info.value) == (f"cannot import {tmp_path / 'k.tar.gz'}: caching is switched off "
                               f"(GlobalJITConfig.enable_caching is False); {FIX}")


def test_member_size_limits(tmp_path, monkeypatch):
    from cuopjit.cache import bundle
    from cuopjit.cache.bundle import BUNDLE_FORMAT, BundleError
    monkeypatch.setattr(bundle, "MAX_MEMBER", 4096)
    monkeypatch.setattr(bundle, "MAX_MANIFEST", 2048)
    spec = make_spec(1)
    from cuopjit.cache import entry
    data = entry.encode(spec, fake_cubin(spec, 4096 - 1000))
    data = data + b""
    import hashlib
    manifest = json.dumps({"format": BUNDLE_FORMAT, "records": [], "entries": [
        {"file": spec.file_name, "sha256": hashlib.sha256(data).hexdigest()}]}).encode()
    path = tmp_path / "b.tar.gz"
    _tar(path, {"manifest.json": manifest, f"kernels/{spec.file_name}": data})
    assert len(data) <= 4096 and KernelCache(tmp_path / "t").import_bundle(path).entries == 1
    _tar(path, {"manifest.json": manifest, f"kernels/{spec.file_name}": data + bytes(4097 - len(data))})
    with pytest.raises(BundleError) as info:
        KernelCache(tmp_path / "u").import_bundle(path)
    assert f"(member kernels/{spec.file_name} holds 4.0 KiB, over the 4.0 KiB a member may hold)" in str(info.value)
    _tar(path, {"manifest.json": manifest + b" " * (2049 - len(manifest))})
    with pytest.raises(BundleError, match=r"member manifest.json holds 2.0 KiB, over the 2.0 KiB a member may hold"):
        KernelCache(tmp_path / "v").import_bundle(path)
    _tar(path, {"manifest.json": manifest + b" " * (2048 - len(manifest))})
    assert KernelCache(tmp_path / "w").import_bundle(path).bad[0][1] == "missing from the bundle, or not a regular file"


# --- where templates are found; paths under a file; one warning per unusable directory ------------------------
def test_templates_dir_inside_a_wheel_beside_a_source_tree_or_nowhere(tmp_path, monkeypatch):
    wheel = tmp_path / "wheel" / "cuopjit"
    (wheel / "templates" / "common").mkdir(parents=True)
    (wheel / "templates" / "common/common.cuh.jinja").write_text("")
    monkeypatch.setattr(codegen, "__file__", str(wheel / "build" / "codegen.py"))
    assert codegen.templates_dir() == wheel / "templates"
    tree = tmp_path / "tree"
    (tree / "templates" / "common").mkdir(parents=True)
    (tree / "templates" / "common/common.cuh.jinja").write_text("")
    monkeypatch.setattr(codegen, "__file__", str(tree / "cuopjit" / "build" / "codegen.py"))
    assert codegen.templates_dir() == tree / "templates"
    monkeypatch.setattr(codegen, "__file__", str(tmp_path / "none" / "build" / "codegen.py"))
    with pytest.raises(FileNotFoundError, match=f"^cuopjit templates not found under {tmp_path / 'none'}: "
                                                "reinstall cuopjit$"):
        codegen.templates_dir()


def test_file_above_stops_at_an_ancestor_it_cannot_stat(tmp_path, monkeypatch):
    from cuopjit.cache import access
    (tmp_path / "a").write_text("a file")
    path = tmp_path / "a" / "b" / "c"
    assert access._file_above(path) == tmp_path / "a"
    real_stat = os.stat

    def denied(p, *args, **kwargs):
        if str(p) == str(tmp_path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(p))
        return real_stat(p, *args, **kwargs)
    monkeypatch.setattr(os, "stat", denied)
    assert access._file_above(path) == path.parent


def test_each_unusable_directory_is_warned_about_once(tmp_path, caplog):
    blockers = [tmp_path / "f1", tmp_path / "f2"]
    with caplog.at_level(logging.WARNING, logger="cuopjit"):
        for b in blockers:
            b.write_text("a file")
            for i in (1, 2):
                KernelCache(b).get_or_build(make_spec(i), lambda i=i: fake_cubin(make_spec(i)))
    for b in blockers:
        assert caplog.text.count(f"cache: {b} is a file, not a directory; compiled kernels are kept in memory") == 1


# --- the command line's own parsing ----------------------------------------------------------------------------
def test_config_flags_map_to_jit_config_fields():
    from cuopjit.cli import args as cli_args
    cli = importlib.import_module("cuopjit.cli.main")   # the module: cuopjit.cli.main is the function
    parser = cli.build_parser()
    cfg = cli_args.config_from(parser.parse_args(["show", "relu"]))
    assert (cfg.enable_loop_unroll, cfg.enable_memory_coalescing, cfg.enable_shared_memory_opt,
            cfg.enable_tensor_core, cfg.enable_tma, cfg.max_registers) == (True, True, True, False, False, 0)
    cfg = cli_args.config_from(parser.parse_args(["show", "relu", "--no-unroll", "--no-coalescing", "--no-shared-memory-opt",
                                         "--tensor-core", "--tma", "--max-registers", "64", "--tile-size", "32",
                                         "--block-size", "128", "--kernel-type", "tiled", "--optimization-level",
                                         "O1"]))
    assert (cfg.enable_loop_unroll, cfg.enable_memory_coalescing, cfg.enable_shared_memory_opt,
            cfg.enable_tensor_core, cfg.enable_tma, cfg.max_registers, cfg.tile_size, cfg.block_size,
            cfg.kernel_type, cfg.optimization_level) == (False, False, False, True, True, 64, 32, 128, "tiled", "O1")


def test_op_and_dtype_selection(capsys):
    from cuopjit.cli import args as cli_args
    cli = importlib.import_module("cuopjit.cli.main")   # the module: cuopjit.cli.main is the function
    ns = cli.build_parser().parse_args(["prewarm", "--op", "relu,gemm"])
    assert cli_args.selection(ns) == (["relu", "gemm"], ["float32", "float64"])
    rc, _, err = _cli(capsys, "prewarm", "--arch", "sm_80", "--dtype", "float8")
    assert (rc, err) == (2, "cuopjit prewarm: error: unknown dtype 'float8': choose from float32, float64, float16, "
                            "bfloat16\n")


def test_architectures_from_the_environment_are_named_as_such(monkeypatch):
    from cuopjit.cli import args as cli_args
    from cuopjit.build import compiler
    monkeypatch.setenv("CUOPJIT_ARCH", "sm_75")
    known = ", ".join(compiler.supported_archs())
    with pytest.raises(ValueError, match=rf"^CUOPJIT_ARCH sm_75 is older than sm_80, the oldest architecture cuopjit "
                                         rf"supports: choose from {known}$"):
        cli_args.archs_from(None)
    with pytest.raises(ValueError, match=r"^--arch sm_75 is older than sm_80"):
        cli_args.archs_from(["sm_75"])
    monkeypatch.setenv("CUOPJIT_ARCH", "sm_90,sm_80")
    assert cli_args.archs_from(None) == ["sm_90", "sm_80"] and cli_args.archs_from(["sm_80"]) == ["sm_80"]


def test_architecture_errors_say_what_to_write(monkeypatch):
    from cuopjit.cli import args as cli_args
    from cuopjit.build import compiler
    monkeypatch.setenv("CUOPJIT_ARCH", "bogus!")
    with pytest.raises(ValueError, match=r"^CUOPJIT_ARCH bogus! is not a target this NVRTC \(\d+\.\d+\) knows: "
                                         r"choose from sm_80, "):
        cli_args.archs_from(None)
    monkeypatch.setenv("CUOPJIT_ARCH", "")
    with pytest.raises(ValueError, match=r"^name the target architectures, e.g. --arch sm_80,sm_90 \(or set "
                                         r"CUOPJIT_ARCH\)$"):
        cli_args.archs_from(None)
    known = ", ".join(compiler.supported_archs())
    with pytest.raises(ValueError, match=rf"^--arch sm_99 is not a target this NVRTC \({compiler.nvrtc_version()}\) "
                                         rf"knows: choose from {known}$"):
        cli_args.archs_from(["sm_99"])


def test_listing_skips_an_entry_it_cannot_open(filled, monkeypatch):
    from cuopjit.cache import maintain
    real = maintain.entry.peek_header
    denied = str(filled.layer.entry_path(make_spec(1)))

    def peek(path):
        if path == denied:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        return real(path)
    monkeypatch.setattr(maintain.entry, "peek_header", peek)
    assert [e.name for e in filled.entries()] == ["fake_k0_sm90"]
