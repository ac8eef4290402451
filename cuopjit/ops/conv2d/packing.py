"""A Convolution2D's packed weight, made once: a ConvPlan split into its packing and its forward (pure functions).

A family plan (problem.ConvPlan) is self-contained: its first launches pack the weight into the workspace
bytes [packed_at, workspace) and the later ones read them there, so tuning, prewarm and `show` run and list
it as it is. An operator runs it in two parts instead: `split(plan, address)` moves the packed bytes to
`address`, memory the operator keeps (cuopjit/ops/conv2d/operator.py), giving

    packing   the pack launches alone, writing at `address` (run when the plan is first made, and again by every
              set_weight: the weight's layout for the kernels is made once per set_weight, not per forward)
    forward   the other launches, reading at `address`, with the workspace cut to [0, packed_at)

The address enters the launches as a 64-bit scalar (the kernels' pointer parameters take its bytes): a
forward plan belongs to the operator whose memory it names. `key(plan)` says which plans share one packing
(the same launches and bytes): another input shape of the same layer reuses it.
"""
from __future__ import annotations

import dataclasses

from ...run.plan import Arg, KernelLaunch, Plan, i64
from .problem import ConvPlan


def packed_bytes(plan: ConvPlan) -> int:
    """Bytes of the packed weight (0: the plan packs nothing)."""
    return plan.workspace - plan.packed_at if plan.pack_launches else 0


def _moved(kl: KernelLaunch, ws: int, start: int, address: int) -> KernelLaunch:
    """`kl` with its workspace pointers at or past `start` replaced by `address` + the same distance from start."""
    def move(a: Arg) -> Arg:
        if a.kind == "ptr" and a.value == ws and a.offset >= start:
            return i64(address + a.offset - start)
        return a
    return dataclasses.replace(kl, args=tuple(move(a) for a in kl.args))


def split(plan: ConvPlan, address: int) -> tuple[Plan, Plan]:
    """(packing, forward) of `plan` with its packed weight at device `address` (see the module docstring)."""
    ws, start, n = len(plan.operands), plan.packed_at, plan.pack_launches
    launches = [_moved(kl, ws, start, address) for kl in plan.launches]
    packing = Plan(tuple(launches[:n]), plan.operands, choice=plan.choice + " (weight pack)")
    forward = Plan(tuple(launches[n:]), plan.operands, workspace=start, choice=plan.choice)
    return packing, forward


def key(plan: ConvPlan) -> tuple:
    """What decides the packed bytes: the pack launches (with the packed region at address 0) and its size."""
    return split(plan, 0)[0].launches, packed_bytes(plan)
