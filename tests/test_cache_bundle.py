"""Bundles: export → import into an empty cache compiles nothing; tampered bundles are caught."""
from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tarfile

import pytest

from cache_fakes import build_counts, counting_build, fake_cubin, make_spec, temp_files
from cuopjit.cache import KernelCache
from cuopjit.cache.bundle import BUNDLE_FORMAT, BundleError

SPECS = [make_spec(i, arch) for i in range(3) for arch in ("sm_80", "sm_90")]


def _exported(cache_dir, tmp_path):
    cache = KernelCache(cache_dir)
    for s in SPECS:
        cache.get_or_build(s, lambda s=s: fake_cubin(s))
    cache.store_record("tuning", "gemm|64x64|float32|sm_90", {"config": "t64", "ms": 0.5})
    path = tmp_path / "kernels.tar.gz"
    result = cache.export_bundle(path)
    assert (result.entries, result.records, result.bad) == (6, 1, [])
    return path


def test_round_trip_into_an_empty_cache_compiles_nothing(cache_dir, tmp_path):
    bundle = _exported(cache_dir, tmp_path)
    target, log = tmp_path / "target", tmp_path / "builds.log"
    result = KernelCache(target).import_bundle(bundle)
    assert (result.entries, result.records, result.skipped, result.bad) == (6, 1, 0, [])
    fresh = KernelCache(target)
    for s in SPECS:
        assert fresh.get_or_build(s, counting_build(s, log)) == (fake_cubin(s), True)
    assert build_counts(log) == {}
    assert fresh.load_record("tuning", "gemm|64x64|float32|sm_90") == {"config": "t64", "ms": 0.5}
    assert fresh.verify().bad == [] and temp_files(target) == []
    assert KernelCache(target).import_bundle(bundle).skipped == 6


def test_an_unpacked_bundle_works_as_a_readonly_layer(cache_dir, tmp_path):
    bundle = _exported(cache_dir, tmp_path)
    unpacked = tmp_path / "shipped"
    with tarfile.open(bundle) as tar:
        tar.extractall(unpacked, filter="data")
    cache = KernelCache(tmp_path / "user", readonly=(unpacked,))
    assert all(cache.get_or_build(s, lambda: pytest.fail("rebuilt"))[1] for s in SPECS)


def _rewrite(bundle, change) -> None:
    """Rebuild the bundle with `change(members)` applied to its {name: bytes}."""
    with tarfile.open(bundle) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    change(members)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    bundle.write_bytes(buf.getvalue())


def test_tampered_members_are_not_installed(cache_dir, tmp_path):
    bundle = _exported(cache_dir, tmp_path)
    victim = f"kernels/{SPECS[0].file_name}"

    def tamper(members):
        data = bytearray(members[victim])
        data[-1] ^= 1
        members[victim] = bytes(data)
        manifest = json.loads(members["manifest.json"])
        manifest["entries"].append({"file": "../../evil.cubin", "sha256": "0" * 64})
        members["manifest.json"] = json.dumps(manifest).encode()
    _rewrite(bundle, tamper)
    target = tmp_path / "target"
    result = KernelCache(target).import_bundle(bundle)
    assert result.entries == 5
    assert sorted(result.bad) == [("../../evil.cubin", "not an entry file name"),
                                  (victim, "sha256 differs from the manifest")]
    assert not (target / "kernels" / SPECS[0].file_name).exists()
    assert not (tmp_path / "evil.cubin").exists()


def test_member_matching_a_forged_manifest_is_still_verified(cache_dir, tmp_path):
    import hashlib
    bundle = _exported(cache_dir, tmp_path)
    victim = f"kernels/{SPECS[0].file_name}"

    def forge(members):
        members[victim] = members[f"kernels/{SPECS[1].file_name}"]
        manifest = json.loads(members["manifest.json"])
        for item in manifest["entries"]:
            if item["file"] == SPECS[0].file_name:
                item["sha256"] = hashlib.sha256(members[victim]).hexdigest()
        members["manifest.json"] = json.dumps(manifest).encode()
    _rewrite(bundle, forge)
    result = KernelCache(tmp_path / "target").import_bundle(bundle)
    assert result.entries == 5 and result.bad[0][0] == SPECS[0].file_name and "name:" in result.bad[0][1]


def test_not_a_bundle_says_how_to_make_one(tmp_path):
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not a tar")
    with pytest.raises(BundleError, match=r"junk.tar.gz is not a readable cuopjit bundle .*cuopjit cache export"):
        KernelCache(tmp_path / "c").import_bundle(junk)
    empty = tmp_path / "empty.tar"
    with tarfile.open(empty, "w"):
        pass
    with pytest.raises(BundleError, match=r"empty.tar is not a readable cuopjit bundle \(it does not start with a "
                                         r"manifest.json of format cuopjit-bundle-1\); make one with `cuopjit"):
        KernelCache(tmp_path / "c").import_bundle(empty)


def test_truncated_bundle_is_not_readable(cache_dir, tmp_path):
    bundle = _exported(cache_dir, tmp_path)
    data = bundle.read_bytes()
    bundle.write_bytes(data[:len(data) // 2])
    with pytest.raises(BundleError, match=r"kernels.tar.gz is not a readable cuopjit bundle \(truncated or corrupt: "
                                          r".+\); make one with `cuopjit cache export`$"):
        KernelCache(tmp_path / "target").import_bundle(bundle)


@pytest.mark.parametrize("part, value", [("entries", "kernels"), ("entries", [1, 2]), ("entries", None),
                                         ("records", {"a": 1}), ("records", ["x"])])
def test_malformed_manifest_is_not_readable(cache_dir, tmp_path, part, value):
    bundle = _exported(cache_dir, tmp_path)

    def change(members):
        manifest = json.loads(members["manifest.json"])
        manifest[part] = value
        members["manifest.json"] = json.dumps(manifest).encode()
    _rewrite(bundle, change)
    shown = re.escape(json.dumps(value)[:40])
    with pytest.raises(BundleError, match=rf"is not a readable cuopjit bundle \(manifest.json: '{part}' must be a list "
                                          rf"of objects, not {shown}\)"):
        KernelCache(tmp_path / "target").import_bundle(bundle)


def test_gzip_bomb_is_refused_before_its_member_is_read(tmp_path):
    """A member declaring 256 MiB (of zeros: a file of about 250 KiB) is refused from its header, in constant memory."""
    bomb = tmp_path / "bomb.tar.gz"

    class Zeros(io.RawIOBase):
        def __init__(self, n):
            self.left = n

        def readinto(self, buf):
            n = min(len(buf), self.left)
            buf[:n] = bytes(n)
            self.left -= n
            return n
    manifest = json.dumps({"format": BUNDLE_FORMAT, "entries": [{"file": "k-0123456789abcdef.cubin",
                                                                 "sha256": "0" * 64}], "records": []}).encode()
    with tarfile.open(bomb, "w:gz", compresslevel=9) as tar:
        for name, size, data in [("manifest.json", len(manifest), io.BytesIO(manifest)),
                                 ("kernels/k-0123456789abcdef.cubin", 256 << 20, Zeros(256 << 20))]:
            info = tarfile.TarInfo(name)
            info.size = size
            tar.addfile(info, data)
    assert bomb.stat().st_size < 1 << 20
    code = f"""
import resource, sys
from cuopjit.cache import KernelCache
from cuopjit.cache.bundle import BUNDLE_FORMAT, BundleError
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    KernelCache({str(tmp_path / "target")!r}).import_bundle({str(bomb)!r})
except BundleError as exc:
    print(exc)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    message, grown_mib = out.stdout.splitlines()
    assert message == (f"{bomb} is not a readable cuopjit bundle (member kernels/k-0123456789abcdef.cubin holds "
                       "256.0 MiB, over the 64.0 MiB a member may hold); make one with `cuopjit cache export`")
    assert int(grown_mib) < 64, f"reading the bundle grew the process by {grown_mib} MiB"
