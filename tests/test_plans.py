"""Plans as data, targets, and prewarm = run: what prewarm builds is exactly what forward plans."""
from __future__ import annotations

import pytest

from cuopjit.build import pipeline
from cuopjit import target
from cuopjit.cli.main import main as cli_main
from cuopjit.ops import FAMILIES
from cuopjit.run.plan import KernelLaunch, Plan, blob, i32, ptr, scalar
from cuopjit.prewarm import representative_plans

from conftest import make_config

SPEC = pipeline.make_spec("elementwise/elementwise.cu.jinja", "elementwise", "t", {"x": 1})


def test_prewarm_builds_exactly_what_every_family_plans(cache_dir, capsys):
    assert cli_main(["prewarm", "--arch", "sm_80,sm_90", "--quiet"]) == 0
    assert "prewarmed" in capsys.readouterr().out
    planned = representative_plans(targets=("sm_80", "sm_90"))
    assert {p.op for p in planned} == set(FAMILIES)
    assert {p.target.arch for p in planned} == {"sm_80", "sm_90"}
    assert {p.problem.dtype for p in planned} == {"float32", "float64"}
    misses = [(spec.name, p.target.arch) for p in planned for spec in p.plan.specs
              if not pipeline.is_cached(spec, p.target.arch)]
    assert misses == []


def test_plans_follow_the_target():
    """An automatic choice that depends on device facts (SM count, clusters) is planned from the target."""
    sm80 = representative_plans(targets=("sm_80",))
    sm90 = representative_plans(targets=("sm_90",))
    assert all(kl.cluster == (1, 1, 1) for p in sm80 for kl in p.plan.launches)
    assert any(kl.cluster != (1, 1, 1) for p in sm90 for kl in p.plan.launches)


@pytest.mark.parametrize("fields", [
    dict(kernel_type="tiled", tile_size=32, block_size=256, optimization_level="O2", enable_tensor_core=True,
         enable_tma=True, max_registers=255),
    dict(kernel_type="simple", tile_size=16, block_size=256),
    dict(kernel_type="tiled", tile_size=32, block_size=256),
    dict(kernel_type="tensor_core", tile_size=64, block_size=256),
    dict(kernel_type="warp_optimized", tile_size=128),
])
def test_every_family_plans_the_seed_configurations(fields):
    cfg = make_config(**fields).snapshot()
    planned = representative_plans(targets=("sm_90",), config=cfg)
    assert {p.op for p in planned} == set(FAMILIES)
    specs = {spec for p in planned for spec in p.plan.specs}
    assert all(s.optimization_level == cfg.optimization_level for s in specs)
    assert all(s.max_registers == cfg.max_registers for s in specs)


def test_a_block_over_1024_threads_is_refused_with_what_to_choose():
    with pytest.raises(ValueError, match="2048 threads per block is over 1024: choose block_size <= 1024"):
        KernelLaunch(SPEC, (1,), (2048,), ())


def test_parameters_are_typed():
    with pytest.raises(ValueError, match="unknown parameter kind 'u8'"):
        from cuopjit.run.plan import Arg
        Arg("u8", 1)
    with pytest.raises(Exception):
        i32(2 ** 31)
    with pytest.raises(ValueError, match="non-empty bytes"):
        blob(b"")
    assert scalar(__import__("numpy").dtype("float64"), 1.5).kind == "f64"


def test_a_plan_rejects_a_pointer_past_its_operands():
    kl = KernelLaunch(SPEC, (1,), (32,), (ptr(0), ptr(2)))
    with pytest.raises(ValueError, match="pointer index 2 is past the plan's 2 operands"):
        Plan((kl,), ("x", "y"))
    Plan((kl,), ("x", "y"), workspace=64)   # index 2 = the workspace


def test_named_targets():
    t = target.named("sm_90")
    assert t.clusters and t.tma and t.sm_count == 132 and t.capability == 90
    assert not target.named("sm_80").clusters
    with pytest.raises(ValueError, match="no target named 'sm_75': choose one of sm_80"):
        target.named("sm_75")
