"""Every field of a tuning record's key (cuopjit/tuning.py record_key / choice_key) matters: the family, each
non-float field of the problem (sizes by power-of-two bucket; a convolution's window and groups exactly), the
precision, and the device identity (name,
SM count, architecture, driver). Changing any one changes the key; a size within its bucket, or a float
setting (alpha, beta, eps: arguments, not the kernel), keeps it. No GPU: the driver version is faked.
"""
from __future__ import annotations

import dataclasses

import pytest

from cuopjit import tuning
from cuopjit.ops import FAMILIES
from cuopjit.target import named

SM90 = named("sm_90")


@pytest.fixture(autouse=True)
def driver(monkeypatch):
    version = ["13.0"]
    monkeypatch.setattr(tuning.driver, "driver_version", lambda: version[0])
    return version


def other_value(value):
    """A value of the same kind in another bucket (ints: far beyond the power of two above)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return 4 * value + 3
    if isinstance(value, str):
        return {"float32": "float64", "float64": "float32"}.get(value, value + "x")
    if dataclasses.is_dataclass(value):
        first = dataclasses.fields(value)[1]
        return dataclasses.replace(value, **{first.name: other_value(getattr(value, first.name))})
    if isinstance(value, tuple):
        return value + value[:1] if value else (0,)
    raise AssertionError(f"no other value for {value!r}")


def problems():
    """The first representative problem of each family (every problem type the families have)."""
    seen = {}
    for name, (cls, _) in FAMILIES.items():
        found = list(cls.family.problems())
        if found:
            seen.setdefault(type(found[0]), (name, found[0]))
    return list(seen.values())


@pytest.mark.parametrize("family, problem", [pytest.param(f, p, id=f"{f}-{type(p).__name__}") for f, p in problems()])
def test_each_problem_field_is_in_the_key(family, problem):
    key = tuning.record_key(family, problem, SM90)
    for f in dataclasses.fields(problem):
        value = getattr(problem, f.name)
        if isinstance(value, float):
            changed = dataclasses.replace(problem, **{f.name: value + 0.5})
            assert tuning.record_key(family, changed, SM90) == key, f"{family}: float field {f.name} splits records"
            continue
        changed = dataclasses.replace(problem, **{f.name: other_value(value)})
        assert tuning.record_key(family, changed, SM90) != key, f"{family}: the key ignores {f.name}"


def test_sizes_share_a_record_within_their_power_of_two_bucket():
    g = FAMILIES["gemm"][0].family.problems()[0]
    for field, within, beyond in (("m", 4000, 4097), ("k", 2049, 2048)):   # both buckets of 4096
        key = tuning.record_key("gemm", dataclasses.replace(g, **{field: 4096}), SM90)
        assert tuning.record_key("gemm", dataclasses.replace(g, **{field: within}), SM90) == key
        assert tuning.record_key("gemm", dataclasses.replace(g, **{field: beyond}), SM90) != key


@pytest.mark.parametrize("field, value, other", [("kh", 3, 4), ("kw", 5, 7), ("sh", 3, 4), ("pw", 1, 2),
                                                   ("groups", 3, 4), ("dh", 2, 1)])
def test_a_convolution_window_never_shares_a_record(field, value, other):
    """Kernel size, stride, padding, dilation and groups are the kernel's code: a 3x3 and a 4x4 never share."""
    conv = FAMILIES["conv2d"][0].family.problems()[0]
    key = tuning.record_key("conv2d", dataclasses.replace(conv, **{field: value}), SM90)
    assert tuning.record_key("conv2d", dataclasses.replace(conv, **{field: other}), SM90) != key
    assert tuning.record_key("conv2d", dataclasses.replace(conv, c=conv.c - 1, **{field: value}), SM90) == key


def test_family_precision_and_each_device_fact_are_in_the_key(driver):
    g = FAMILIES["gemm"][0].family.problems()[0]
    key = tuning.record_key("gemm", g, SM90)
    assert tuning.record_key("matmul", g, SM90) != key
    assert tuning.record_key("gemm", g, SM90, "3xtf32") != key
    assert tuning.record_key("gemm", g, SM90, "tf32") == key
    for field, value in (("name", "H100 PCIe"), ("sm_count", 114), ("arch", "sm_90a")):
        assert tuning.record_key("gemm", g, dataclasses.replace(SM90, **{field: value})) != key, field
    for other in ("sm_80", "sm_86", "sm_89"):
        assert tuning.record_key("gemm", g, named(other)) != key
    driver[0] = "13.1"
    assert tuning.record_key("gemm", g, SM90) != key


def test_a_choice_key_is_its_record_key_and_its_label():
    g = FAMILIES["gemm"][0].family.problems()[0]
    key = tuning.record_key("gemm", g, SM90)
    keys = {tuning.choice_key(key, label) for label in ("t128x128x16_r8x8", "t128x128x16_r8x8_split_k3", "t64x64")}
    assert len(keys) == 3 and all(k.startswith(key) for k in keys)
    other = tuning.record_key("gemm", dataclasses.replace(g, n=7), SM90)
    assert tuning.choice_key(other, "t64x64") != tuning.choice_key(key, "t64x64")
