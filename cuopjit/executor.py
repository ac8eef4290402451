"""Run plans: load a Plan's kernels on a device and launch them on a stream per call.

`load(plan, ordinal, settings)` returns a `Runner`; `runner(pointers, stream)` launches every
kernel in order. A plan with workspace gets it from the stream-ordered pool on the call's stream
and gives it back there after the last launch, so concurrent streams never share scratch memory
and graph capture records the allocation as a graph node.
"""
from __future__ import annotations

from typing import Callable

from . import debug, kernels, memory
from .config import get_default_global_jit_config
from .launch import Launch
from .plan import Plan
from .settings import RunSettings


class Runner:
    """A plan loaded on one device. `kernels` are the LoadedKernels in launch order (profiles, explain)."""

    __slots__ = ("plan", "ordinal", "launches", "kernels", "__weakref__")

    def __init__(self, plan: Plan, ordinal: int, launches: list[Launch], loaded: list[kernels.LoadedKernel]):
        self.plan, self.ordinal, self.launches, self.kernels = plan, ordinal, tuple(launches), tuple(loaded)

    def __call__(self, pointers: tuple, stream: int) -> None:
        workspace = self.plan.workspace
        if workspace:
            ws = memory.allocate(workspace, self.ordinal, stream)
            try:
                pointers = (*pointers, ws)
                for launch in self.launches:
                    launch(pointers, stream)
            finally:
                memory.release(ws, workspace, self.ordinal, stream)
            return
        for launch in self.launches:
            launch(pointers, stream)

    @property
    def kernel_names(self) -> str:
        return " + ".join(k.spec.name for k in self.kernels) or "(nothing to launch)"

    @property
    def units(self) -> str:
        return ", ".join(dict.fromkeys(kl.units for kl in self.plan.launches)) or "none"


def load(plan: Plan, ordinal: int, settings: RunSettings) -> Callable[[tuple, int], None]:
    """The plan's kernels loaded (or built) on device `ordinal`, packed for launching.

    A plan of one launch and no workspace returns that launch as a closure (`Launch.fast`: one call
    less per forward); `runner_of` gives the Runner, with the plan and its kernels, for either.
    """
    launches, loaded = [], []
    for kl in plan.launches:
        kernel = kernels.get_function(kl.spec, ordinal, settings.cache_dir, settings.persistent)
        loaded.append(kernel)
        launches.append(Launch(kernel.function, kl, len(plan.operands) + (1 if plan.workspace else 0), kernel))
    runner = Runner(plan, ordinal, launches, loaded)
    for launch in launches:
        launch.runner = runner
    run = launches[0].fast() if len(launches) == 1 and not plan.workspace else runner
    if get_default_global_jit_config().debug():   # enable_debug: each launch is checked synchronously
        return debug.checked(run, runner)
    return run


def runner_of(run: Callable) -> Runner:
    """The Runner behind what `load` returned (a Runner, a Launch or a Launch's closure)."""
    if isinstance(run, Runner):
        return run
    return getattr(run, "launch", run).runner


NOTHING = Runner(Plan((), ()), -1, [], [])
