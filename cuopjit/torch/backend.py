"""The "cuopjit" torch.compile backend: `torch.compile(model, backend="cuopjit")` after `import cuopjit.torch`.

It works on the torch-level FX graph Dynamo hands a backend (call_function / call_method /
call_module nodes on torch's Python API, parameters as placeholders with their real tensors as
example inputs), not on an aot_autograd / ATen graph: that graph keeps conv2d, batch_norm,
linear and layer_norm as single nodes whose arguments say everything the kernels need, and needs
no decompositions (it is inference only, so no backward graph is wanted). The steps:

    1. inference only: with grad on and an input requiring grad, a module in training mode, or a
       batch_norm / dropout node in training mode, the graph runs as it is (one log line says why)
    2. fusion.plan: fake values on every node, fused ops written out, nodes checked and grouped
    3. each group becomes one call_function node calling a kernels.Kernel in place of its nodes;
       every other node stays the torch op it was, in the same graph
    4. the result: the rewritten GraphModule's forward on cuopjit's device and torch's current stream,
       or with options={"cuda_graphs": True} that, captured once and replayed (graphs.Replay)

Half precision: a model in float16 or bfloat16 (`.half()`, `.to(torch.bfloat16)`) runs its nodes on the
families' 16-bit kernels wherever an operator family has them and plans the setting (support.py, kernels.py);
the others stay torch. Under torch.autocast, Dynamo's graph holds fp32 operands with 16-bit outputs: those
nodes stay torch, with their reason in the report.

Options (torch.compile(..., options={...})): "cuda_graphs" (default False); "tf32": True / False for
float32 conv2d and products on tensor cores (default: torch's own flags, torch.backends.cudnn.allow_tf32
for conv2d and torch.backends.cuda.matmul.allow_tf32 for linear / matmul / bmm, so the backend rounds
as torch eager would). Weights (and BatchNorm statistics folded into them) are read at compile time:
change them and call torch._dynamo.reset() before the next run.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.fx as fx
from torch._dynamo import register_backend

from .. import log
from ..errors import CuopjitError
from ..device import driver
from . import report as reports
from .fusion import CALLS, Plan, PlanError, plan
from .common import HALF, raw_stream
from .graphs import Replay
from .heads import Launch
from .kernels import Kernel, build, check_plans
from .prebuild import build_all
from .nodes import Call, describe, mutates, target_name

OPTIONS = ("cuda_graphs", "tf32")


def training(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> str | None:
    """Why the graph is a training graph (None: inference)."""
    if torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs):
        return ("grad mode is on and inputs require grad (training or autograd): run the model under "
                "torch.no_grad() or torch.inference_mode() to use cuopjit")
    modules = dict(gm.named_modules())
    for node in gm.graph.nodes:
        if node.op == "call_module" and modules[node.target].training:
            return f"module {node.target} is in training mode: call model.eval() to use cuopjit"
        call = describe(node, modules) if node.op in CALLS else None
        if isinstance(call, Call) and call.op in ("batch_norm", "dropout") and call.args["training"]:
            return f"node {node.name} ({call.op}) is in training mode: call model.eval() to use cuopjit"
    return None


def _device(example_inputs: Sequence[Any]) -> int | None:
    for x in example_inputs:
        if isinstance(x, torch.Tensor) and x.is_cuda:
            return x.get_device()
    return None


def _tf32(options: dict[str, Any]) -> dict[str, bool]:
    choice = options.get("tf32")
    if choice is None:
        return {"conv": torch.backends.cudnn.allow_tf32, "matmul": torch.backends.cuda.matmul.allow_tf32}
    return {"conv": bool(choice), "matmul": bool(choice)}


def rewrite(p: Plan, launch: Launch, tf32: dict[str, bool], report: reports.Report,
            check: Callable[[Kernel], None] | None = None) -> list[Kernel]:
    """Replace each group's nodes by one call of its kernel (in place), fill the report; the kernels. `check`
    (kernels.check_plans) is run on the kernels of float16 / bfloat16 groups: what it raises leaves them torch."""
    gm, ctx = p.ctx.gm, p.ctx
    kernels = []
    replaced: dict[fx.Node, fx.Node] = {}   # a group's output -> the call of its kernel (calls hold old nodes)
    for group in p.groups:
        try:
            kernel, inputs = build(group, ctx, launch, tf32)
            if check is not None and ctx.val(group.output).dtype in HALF:
                check(kernel)
        except (CuopjitError, ValueError, TypeError, LookupError) as exc:   # a setting an operator refuses: torch
            p.torch.update((n, f"cuopjit refused it: {str(exc).splitlines()[0]}") for n in group.nodes)
            continue
        kernels.append(kernel)
        report.kernels.append(reports.Kernel(kernel.name, tuple(n.name for n in group.nodes), tuple(group.fusions)))
        if kernel.unfused:
            report.notes.append(f"{kernel.name}: the program runs after the product: {kernel.unfused}")
        with gm.graph.inserting_before(group.output):
            call = gm.graph.call_function(kernel, tuple(replaced.get(n, n) for n in inputs))
        call.meta.update(group.output.meta)
        replaced[group.output] = call
        report.entries += [reports.Entry(n.name, target_name(n, ctx.modules), "cuopjit", kernel.name)
                           for n in group.nodes]
        group.output.replace_all_uses_with(call)
        for node in reversed(group.nodes):
            gm.graph.erase_node(node)
    report.entries += [reports.Entry(n.name, target_name(n, ctx.modules), "torch", why) for n, why in p.torch.items()]
    gm.graph.lint()
    gm.recompile()
    return kernels


def _torch_only(gm: fx.GraphModule, report: reports.Report, why: str) -> Callable[..., Any]:
    """The graph as it is (torch's eager execution), with the reason logged once and reported."""
    report.fallback = why
    modules = dict(gm.named_modules())
    report.entries += [reports.Entry(n.name, target_name(n, modules), "torch", why)
                       for n in gm.graph.nodes if n.op in CALLS]
    log.warn_once(f"torch-backend:{why}", f"torch.compile backend 'cuopjit': {why}; this graph runs on torch")
    return gm.forward


def _runner(gm: fx.GraphModule, launch: Launch, ordinal: int) -> Callable[..., Any]:
    forward, current, set_device = gm.forward, driver.current_ordinal, driver.set_device

    def run(*args: Any) -> Any:
        if current() != ordinal:
            set_device(ordinal)
        launch.stream = raw_stream(ordinal)
        return forward(*args)
    return run


def compile_graph(gm: fx.GraphModule, example_inputs: Sequence[Any], options: dict[str, Any] | None = None
                  ) -> Callable[..., Any]:
    """The backend: `gm` with every node cuopjit can run replaced by cuopjit kernels (see the module doc)."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"torch.compile backend 'cuopjit': unknown option(s) {', '.join(unknown)}; "
                         f"the options are {', '.join(OPTIONS)}")
    report = reports.new_report(options)
    why = training(gm, example_inputs)
    ordinal = _device(example_inputs)
    if why is None and ordinal is None:
        why = "no input is a CUDA tensor"
    if why is not None:
        return _torch_only(gm, report, why)
    driver.set_device(ordinal)
    try:
        p = plan(gm, example_inputs, "cuda")
    except PlanError as exc:
        return _torch_only(gm, report, str(exc))
    report.notes += p.notes
    launch = Launch()
    kernels = rewrite(p, launch, _tf32(options), report, check_plans)
    built = build_all([sample for k in kernels for sample in k.samples], ordinal)
    report.notes.append(f"{built} kernels built (or found in the cache) and loaded in parallel before the first call")
    run = _runner(gm, launch, ordinal)
    if not options.get("cuda_graphs"):
        return run
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if any(mutates(n, p.ctx.modules) and n.args and n.args[0] in placeholders for n in gm.graph.nodes):
        report.notes.append("cuda_graphs: the graph writes into one of its inputs: it runs without a CUDA graph")
        return run
    constants = [i for i, n in enumerate(placeholders) if n in p.ctx.constants]
    report.notes.append("cuda_graphs: captured on the second call, replayed after")
    return Replay(run, constants)


register_backend(compiler_fn=compile_graph, name="cuopjit")
