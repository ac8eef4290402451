"""Tuning records: one cache record per choice, keyed by problem bucket, precision and GPU identity; a new
choice is timed alone and never discards the others; `time_choices` times choices without records. The
`cuopjit tune` command is tests/test_tuning_cli.py."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from cuopjit import tuning
from cuopjit.cache import get_cache
from cuopjit.config import JITConfig, RunSettings
from cuopjit.ops.gemm import plans as gk
from cuopjit.target import named

from conftest import make_config


@dataclass(frozen=True)
class _Choice:
    label: str


class _Family:
    name = "fake"

    @staticmethod
    def plan(problem, choice, target):
        return choice.label


class _Op:
    family = _Family()

    @staticmethod
    def bind(*args, **kwargs):
        return None, (), None


@pytest.fixture
def fake_gpu(monkeypatch):
    """Timing without a GPU: each label's time comes from `times`; `timed` lists what was timed."""
    times, timed = {}, []
    monkeypatch.setattr(tuning.driver, "driver_version", lambda: "13.0")
    monkeypatch.setattr(tuning.driver, "current_ordinal", lambda: 0)
    monkeypatch.setattr(tuning.executor, "load", lambda plan, ordinal, settings: plan)
    monkeypatch.setattr(tuning, "_time", lambda run, pointers, stream, runs: timed.append(run) or times[run])
    return times, timed


def test_one_record_per_choice_and_a_new_choice_keeps_the_old_ones(tmp_path, fake_gpu):
    times, timed = fake_gpu
    times.update({"a": 2.0, "b": 1.0, "c": 0.5})
    settings = RunSettings.of(JITConfig().snapshot(), str(tmp_path), True, tuning=True)
    problem, t = gk.packed("float32", 1000, 1000, 1000), named("sm_90")
    assert tuning.fastest(_Op(), problem, [_Choice("a"), _Choice("b")], settings, t, (), {}) == "b"
    assert timed == ["a", "b"]
    key = tuning.record_key("fake", problem, t)
    for label in ("a", "b"):
        record = get_cache(str(tmp_path)).load_record(tuning.KIND, tuning.choice_key(key, label))
        assert record["ms"] == times[label] and record["choice"] == label and record["problem"] == key
    # A new choice: only it is timed, and the old records stay and still count.
    progress = []
    plan = tuning.fastest(_Op(), problem, [_Choice("a"), _Choice("b"), _Choice("c")], settings, t, (), {},
                          progress=lambda done, total, label: progress.append((done, total, label)))
    assert plan == "c" and timed == ["a", "b", "c"] and progress == [(0, 1, "c"), (1, 1, "")]
    assert tuning.timings(settings, key, ["a", "b", "c"]) == times


def test_time_choices_times_each_label_once_and_keeps_no_record(tmp_path, fake_gpu):
    times, timed = fake_gpu
    times.update({"a": 2.0, "b": 1.0})
    settings = RunSettings.of(JITConfig().snapshot(), str(tmp_path), True, tuning=True)
    problem, t = gk.packed("float32", 64, 64, 64), named("sm_90")
    got = tuning.time_choices(_Op(), problem, [_Choice("a"), _Choice("b"), _Choice("a")], settings, t, (), {})
    assert got == {"a": 2.0, "b": 1.0} and timed == ["a", "b"]
    assert tuning.timings(settings, tuning.record_key("fake", problem, t), ["a", "b"]) == {}


def test_record_keys_name_bucket_precision_and_gpu(monkeypatch):
    monkeypatch.setattr(tuning.driver, "driver_version", lambda: "13.0")
    t = named("sm_90")
    key = tuning.record_key("gemm", gk.packed("float32", 1000, 1000, 1000), t, "3xtf32")
    assert key.startswith("gemm|dtype=float32,m=1024,n=1024,k=1024,trans_a=False,trans_b=False,aligned=True")
    assert key.endswith(f"|precision=3xtf32|{t.name}|{t.sm_count}|sm_90|13.0")
    assert key != tuning.record_key("gemm", gk.packed("float32", 1000, 1000, 1000), t, "tf32")
    assert tuning.record_key("gemm", gk.packed("float32", 1000, 1000, 1000), t) == \
        tuning.record_key("gemm", gk.packed("float32", 1020, 1000, 1000), t)


def test_precision_reaches_the_snapshot_the_records_use():
    assert make_config(precision="3xtf32").snapshot().precision == "3xtf32"
