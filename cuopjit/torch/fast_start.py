"""`cuopjit.torch.compile(model, *example_inputs)`: a model on cuopjit kernels without Dynamo, for a fast start.

`torch.compile(model, backend="cuopjit")` pays for Dynamo's bytecode trace before the backend sees a graph
(over a second for a ResNet-50, more than the rest of the first call together). This entry captures the
model's forward with `torch.fx.symbolic_trace` instead (Python-level tracing, tens of milliseconds; the
same route torch_tensorrt's `ir="fx"` takes) and hands the graph to the same backend passes
(`backend.compile_graph`: fusion, epilogues, prebuild, `options` as there: "cuda_graphs", "tf32").

    fast = cuopjit.torch.compile(model.eval(), x)      # compiled now, for x's shapes
    y = fast(x)

The graph the tracer makes calls leaf modules (nn.Conv2d, nn.BatchNorm2d, ...) where Dynamo inlines their
functions; the backend reads both. An eval nn.TransformerEncoderLayer without masks is written as the
fused native call Dynamo sees under no_grad (`normalise`), which the backend expands into its primitives.
A model that symbolic tracing cannot follow (Python control flow on tensor values, say) is compiled
through Dynamo instead, with one log line naming why.

Calls run under torch.no_grad() (inference only, as the backend). A compiled graph is specialised to its
inputs' shapes, strides, dtypes and devices: a call with others compiles once more for them (kept, up to
`LIMIT` signatures), as Dynamo's guards would. Weights are read at compile time: change them and compile
again.
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx
import torch.nn as nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.passes.fake_tensor_prop import FakeTensorProp
from torch.nn.utils import stateless

from .. import log
from . import report as reports
from .backend import OPTIONS, compile_graph

LIMIT = 16   # signatures compiled per model before a new one replaces them all


def _signature(args: tuple) -> tuple:
    """What a compiled graph is specialised to: each tensor's shape, strides, dtype and device; other values."""
    return tuple((a.shape, a.stride(), a.dtype, a.device) if isinstance(a, torch.Tensor) else (type(a), a)
                 for a in args)


def _encoder_args(m: nn.TransformerEncoderLayer) -> tuple | None:
    """torch._transformer_encoder_layer_fwd's constant arguments for `m` (after src), None where torch's own
    fast path would not run it (training, batch second, separate q/k/v weights, another activation)."""
    attn = m.self_attn
    if (m.training or not attn.batch_first or not attn._qkv_same_embed_dim or attn.in_proj_bias is None
            or not m.activation_relu_or_gelu or m.norm1.eps != m.norm2.eps):
        return None
    return (attn.embed_dim, attn.num_heads, "self_attn.in_proj_weight", "self_attn.in_proj_bias",
            "self_attn.out_proj.weight", "self_attn.out_proj.bias", m.activation_relu_or_gelu == 2, m.norm_first,
            m.norm1.eps, "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias", "linear1.weight",
            "linear1.bias", "linear2.weight", "linear2.bias")


def normalise(gm: fx.GraphModule) -> list[str]:
    """Leaf modules the backend reads only as Dynamo writes them, rewritten (in place): an eval
    nn.TransformerEncoderLayer called on one tensor becomes torch._transformer_encoder_layer_fwd over its
    parameters (get_attr nodes). The words for the report."""
    modules = dict(gm.named_modules())
    done = []
    for node in list(gm.graph.nodes):
        m = modules.get(node.target) if node.op == "call_module" else None
        if not isinstance(m, nn.TransformerEncoderLayer) or len(node.args) != 1 or node.kwargs:
            continue
        args = _encoder_args(m)
        if args is None:
            continue
        with gm.graph.inserting_before(node):
            values = tuple(gm.graph.get_attr(f"{node.target}.{a}") if isinstance(a, str) else a for a in args)
            call = gm.graph.call_function(torch._transformer_encoder_layer_fwd, (node.args[0], *values, None, None))
        node.replace_all_uses_with(call)
        gm.graph.erase_node(node)
        done.append(f"{node.name}: nn.TransformerEncoderLayer as torch._transformer_encoder_layer_fwd")
    if done:
        gm.graph.lint()
        gm.recompile()
    return done


class _Layer(nn.Module):
    """A model that is itself an nn.TransformerEncoderLayer, held as a leaf module the tracer calls (its own
    forward branches on its input's properties: symbolic tracing cannot follow it)."""

    def __init__(self, layer: nn.TransformerEncoderLayer):
        super().__init__()
        self.layer = layer

    def forward(self, src: torch.Tensor) -> torch.Tensor:
        return self.layer(src)


def trace(model: nn.Module, nargs: int = 1) -> tuple[fx.GraphModule | None, str]:
    """(the model's forward on `nargs` positional inputs as an FX graph, normalised; words on what was done)
    or (None, why it cannot be)."""
    layer = isinstance(model, nn.TransformerEncoderLayer) and nargs == 1
    try:
        gm = fx.symbolic_trace(_Layer(model) if layer else model)
    except Exception as exc:  # noqa: BLE001  any tracing failure: Dynamo follows what the tracer cannot
        first = str(exc).splitlines()[0] if str(exc) else ""
        return None, f"{type(exc).__name__}: {first}"[:300]
    return gm, "; ".join(normalise(gm))


class _Propagation(FakeTensorProp):
    """FakeTensorProp with an eval BatchNorm module's value made like its input's (what it is: same shape,
    strides and dtype) instead of running torch's batch_norm decomposition on fake tensors (a fifth of a
    ResNet-50's propagation)."""

    def call_module(self, target: Any, args: tuple, kwargs: dict) -> Any:
        m = self.fetch_attr(target)
        if (isinstance(m, nn.modules.batchnorm._BatchNorm) and not m.training and m.running_mean is not None
                and len(args) == 1 and not kwargs and isinstance(args[0], torch.Tensor)):
            return torch.empty_like(args[0])
        return super().call_module(target, args, kwargs)


def propagate(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> None:
    """A fake value on every node (what the backend's plan would compute), with the graph's parameters and
    buffers made fake from their shapes, strides and dtypes alone: FakeTensorMode.from_tensor describes each
    real tensor in full (half of a ResNet-50's propagation). Where this fails, the backend propagates itself."""
    reparametrize = getattr(stateless, "_reparametrize_module", None)
    if reparametrize is None:
        return
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    try:
        with mode:
            fakes = {name: torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
                     for name, t in itertools.chain(gm.named_parameters(), gm.named_buffers())}
        inputs = [mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in example_inputs]
        with reparametrize(gm, fakes):
            _Propagation(gm, mode).propagate(*inputs)
    except Exception:  # noqa: BLE001  the backend's own pass runs again and says why, if it fails too
        for node in gm.graph.nodes:
            node.meta.pop("val", None)


class Compiled:
    """`model` compiled for cuopjit per input signature; call it as the model (positional arguments)."""

    def __init__(self, model: nn.Module, options: dict[str, Any]):
        self.model, self.options = model, options
        self.graphs: dict[tuple, Callable[..., Any]] = {}
        self.dynamo: Callable[..., Any] | None = None
        self.why_dynamo: str | None = None
        self.notes: str = ""

    def prepare(self, *args: Any) -> Callable[..., Any]:
        """The compiled callable for inputs like `args` (compiled now if it is new)."""
        if self.dynamo is not None:
            return self.dynamo
        key = _signature(args)
        run = self.graphs.get(key)
        if run is not None:
            return run
        gm, words = trace(self.model, len(args))
        if gm is None:
            self.why_dynamo = words
            log.warn_once(f"fast-start:{type(self.model).__name__}:{words}",
                          f"cuopjit.torch.compile: symbolic tracing cannot follow {type(self.model).__name__} "
                          f"({words}); it is captured with Dynamo (slower to start)")
            self.dynamo = torch.compile(self.model, backend="cuopjit", dynamic=False, options=self.options or None)
            return self.dynamo
        self.notes = words
        with torch.no_grad():
            propagate(gm, args)
            run = compile_graph(gm, list(args), self.options)
        last = reports.last_report()
        if words and last is not None:
            last.notes.append(words)
        if len(self.graphs) >= LIMIT:
            self.graphs.clear()
        self.graphs[key] = run
        return run

    def __call__(self, *args: Any) -> Any:
        run = self.graphs.get(_signature(args)) if self.dynamo is None else self.dynamo
        with torch.no_grad():
            return (self.prepare(*args) if run is None else run)(*args)


def compile(model: nn.Module, *example_inputs: Any, options: dict[str, Any] | None = None) -> Compiled:
    """`model` on cuopjit kernels, captured by symbolic tracing (see the module doc); with `example_inputs`,
    compiled for them now (else at the first call). `options` as the backend's: "cuda_graphs", "tf32"."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"cuopjit.torch.compile: unknown option(s) {', '.join(unknown)}; "
                         f"the options are {', '.join(OPTIONS)}")
    if not isinstance(model, nn.Module):
        raise TypeError(f"cuopjit.torch.compile takes an nn.Module, not {type(model).__name__}: wrap a function "
                        "in a module whose forward calls it")
    compiled = Compiled(model, options)
    if example_inputs:
        compiled.prepare(*example_inputs)
    return compiled
