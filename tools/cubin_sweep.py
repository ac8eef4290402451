"""Compile every representative plan's kernels over a grid of configs, for sm_80 and sm_90; write a JSON map
of kernel name@arch -> sha256 of its cubin. No GPU needed.

    python tools/cubin_sweep.py before.json [JOBS]     # on the old tree
    python tools/cubin_sweep.py after.json [JOBS]      # on the changed tree, then compare the two maps

A refactoring of templates or plan code that must not change the compiled code shows identical hashes.
"""
import hashlib
import json
import sys
from concurrent.futures import ProcessPoolExecutor

from cuopjit.build import pipeline as pipe
from cuopjit.config import JITConfig
from cuopjit.prewarm import kernels_to_build, representative_plans

# (JITConfig fields, dtypes or None for both): the grid of configs the sweep plans every family under
CONFIGS = ([({}, None), ({"enable_tensor_core": True}, None),
            ({"enable_tensor_core": True, "precision": "3xtf32"}, ("float32",))]
           + [({"kernel_type": kt}, None) for kt in ("simple", "tiled", "warp_optimized", "tensor_core")]
           + [({"tile_size": ts, **tc}, None) for ts in (16, 32, 64, 128) for tc in ({}, {"enable_tensor_core": True})]
           + [({"block_size": bs}, None) for bs in (64, 128, 512)]
           + [({"enable_loop_unroll": False, "enable_memory_coalescing": False, "enable_shared_memory_opt": False},
               None), ({"optimization_level": "O1", "max_registers": 128}, None)])


def one(job):
    """(name@arch, sha256 of the cubin) of one kernel."""
    spec, arch = job
    return f"{spec.name}@{arch}", hashlib.sha256(pipe.compile_fresh(spec, arch).cubin).hexdigest()


def main(out: str, jobs_n: int = 2) -> None:
    jobs = {}
    for fields, dtypes in CONFIGS:
        cfg = JITConfig()
        for k, v in fields.items():
            setattr(cfg, k, v)
        plans = representative_plans(targets=("sm_80", "sm_90"), dtypes=dtypes, config=cfg.snapshot())
        for spec, arch in kernels_to_build(plans):
            jobs.setdefault((spec.name, arch), (spec, arch))
    print(len(jobs), "kernels", file=sys.stderr)
    with ProcessPoolExecutor(jobs_n) as ex:
        found = dict(ex.map(one, jobs.values(), chunksize=4))
    with open(out, "w") as f:
        json.dump(dict(sorted(found.items())), f, indent=0)
    print(len(found), "cubins", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2)
