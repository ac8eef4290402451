"""Run plans: load a Plan's kernels on a device and launch them on a stream per call.

`load(plan, ordinal, settings)` returns a `Runner`; `runner(pointers, stream)` launches every
kernel in order. A plan with workspace gets it from the stream-ordered pool on the call's stream
and gives it back there after the last launch, so concurrent streams never share scratch memory
and graph capture records the allocation as a graph node.

GlobalJITConfig.enable_debug's launch check lives here too: while debug is on, `load` wraps the
runner with `checked` (the normal warm path is not touched), so after each launch the stream is
synchronised and a failure (an illegal address, a trap) raises ExecutionError naming the operator
(as the caller of `load` spelled it), the kernel and its template. Inside a CUDA graph capture
nothing is synchronised (the launches are only recorded then).
"""
from __future__ import annotations

from typing import Callable

from ..build import pipeline
from ..config import RunSettings, get_default_global_jit_config
from ..device import memory, streams
from ..errors import ExecutionError
from .launch import Launch
from .plan import Plan


class Runner:
    """A plan loaded on one device. `kernels` are the LoadedKernels in launch order (profiles, explain)."""

    __slots__ = ("plan", "ordinal", "launches", "kernels", "__weakref__")

    def __init__(self, plan: Plan, ordinal: int, launches: list[Launch], loaded: list[pipeline.LoadedKernel]):
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


def load(plan: Plan, ordinal: int, settings: RunSettings, name: str = "an operator") -> Callable[[tuple, int], None]:
    """The plan's kernels loaded (or built) on device `ordinal`, packed for launching.

    `name`: the operator as errors should name it (e.g. 'JITGemmFloat(GemmFloat)').

    A plan of one launch and no workspace returns that launch as a closure (`Launch.fast`: one call
    less per forward); `runner_of` gives the Runner, with the plan and its kernels, for either.
    """
    launches, loaded = [], []
    for kl in plan.launches:
        kernel = pipeline.get_function(kl.spec, ordinal, settings.cache_dir, settings.persistent)
        loaded.append(kernel)
        launches.append(Launch(kernel.function, kl, len(plan.operands) + (1 if plan.workspace else 0), kernel))
    runner = Runner(plan, ordinal, launches, loaded)
    for launch in launches:
        launch.runner = runner
    run = launches[0].fast() if len(launches) == 1 and not plan.workspace else runner
    if get_default_global_jit_config().debug():   # enable_debug: each launch is checked synchronously
        return checked(run, runner, name)
    return run


def runner_of(run: Callable) -> Runner:
    """The Runner behind what `load` returned (a Runner, a Launch or a Launch's closure)."""
    if isinstance(run, Runner):
        return run
    return getattr(run, "launch", run).runner


NOTHING = Runner(Plan((), ()), -1, [], [])


def _capturing(stream: int) -> bool:
    """True while `stream` is being captured (a status the driver refuses to give counts as capturing)."""
    try:
        return streams.capturing(stream)
    except ExecutionError:
        return True


def checked(run: Callable[[tuple, int], None], runner: Runner, name: str) -> Callable[[tuple, int], None]:
    """`run` launch by launch, each followed by a synchronous check of its stream; a failure names the operator
    (`name`) and the kernel. `run` itself is what runs inside a graph capture (nothing may synchronise there)."""
    workspace, ordinal = runner.plan.workspace, runner.ordinal

    def check(stream: int, launch) -> None:
        try:
            streams.synchronize(stream)
        except ExecutionError as exc:
            spec = launch.kl.spec
            raise ExecutionError(f"{name} failed on device {ordinal} in kernel {spec.name} (template {spec.template}, "
                                 f"plan {runner.plan.choice or 'default'}): {exc.error_name}. The CUDA context is "
                                 "unusable after this error: restart the process", exc.error_name) from None

    def run_checked(pointers: tuple, stream: int) -> None:
        if _capturing(stream):
            run(pointers, stream)
            return
        ws = memory.allocate(workspace, ordinal, stream) if workspace else 0
        try:
            for launch in runner.launches:
                launch((*pointers, ws) if workspace else pointers, stream)
                check(stream, launch)
        finally:
            if workspace:
                memory.release(ws, workspace, ordinal, stream)

    run_checked.runner = runner
    return run_checked
