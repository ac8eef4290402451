"""The heuristic's choices pinned as a reviewed table: for every case of the plan geometry table
(tests/test_plan_geometry.py) on each target, the default plan's choice label and kernel names, one line per
case and target in tests/snapshots/heuristics.json. A change to a heuristic (or a kernel's name: its tile, vector width, stages)
shows up here as a readable diff to review.

To accept a change: CUOPJIT_UPDATE_SNAPSHOT=1 python -m pytest tests/test_heuristics_snapshot.py, then review
`git diff tests/snapshots/heuristics.json`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cuopjit.target import named

from conftest import make_config
from plan_cases import Alloc
from test_plan_geometry import RUNS

SNAPSHOT = Path(__file__).parent / "snapshots" / "heuristics.json"


def current() -> dict[str, str]:
    """{"<case id> @ <arch>": "<choice label> :: <kernel>, <kernel>, ..."} of today's code (one line each)."""
    table = {}
    for case, arch in RUNS:
        op, args, kwargs = case.build(Alloc(case.dtype))
        problem = op.problem(*args, **kwargs)
        plan = op.family.default_plan(problem, make_config(**case.config).snapshot(), named(arch))
        table[f"{case.id} @ {arch}"] = f"{plan.choice} :: " + ", ".join(kl.spec.name for kl in plan.launches)
    return table


def diff(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """Readable lines: the case and target, then what it chose before and what it chooses now."""
    lines = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if a is None or b is None:
            lines.append(f"{'+' if a is None else '-'} {key}: {b if a is None else a}")
            continue
        (ca, ka), (cb, kb) = a.split(" :: "), b.split(" :: ")
        if ca != cb:
            lines.append(f"{key}: choice {ca} -> {cb}")
        if ka != kb:
            lines.append(f"{key}: kernels {ka} -> {kb}")
    return lines


def test_the_heuristics_choose_what_the_reviewed_table_says():
    new = current()
    if os.environ.get("CUOPJIT_UPDATE_SNAPSHOT") == "1":
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(json.dumps(new, indent=0, sort_keys=True) + "\n")
        pytest.skip(f"wrote {SNAPSHOT}: review it with git diff")
    old = json.loads(SNAPSHOT.read_text())
    changes = diff(old, new)
    assert not changes, ("the heuristics choose differently from tests/snapshots/heuristics.json "
                         "(CUOPJIT_UPDATE_SNAPSHOT=1 rewrites it after review):\n" + "\n".join(changes))


def test_the_diff_names_the_case_target_and_both_choices():
    old = {"gemm-32-x @ sm_90": "a :: k1", "view-32-z @ sm_80": "v :: k"}
    new = {"gemm-32-x @ sm_90": "b :: k1, k2", "softmax-64-y @ sm_80": "c :: k3"}
    assert diff(old, new) == ["gemm-32-x @ sm_90: choice a -> b", "gemm-32-x @ sm_90: kernels k1 -> k1, k2",
                              "+ softmax-64-y @ sm_80: c :: k3", "- view-32-z @ sm_80: v :: k"]
