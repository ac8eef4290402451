"""PyTorch integration, the only package of cuopjit that imports torch. `import cuopjit.torch`:

- registers cuopjit's operators as `torch.ops.cuopjit.*` (see `library`);
- registers the torch.compile backend "cuopjit" (see `backend`): `torch.compile(model, backend="cuopjit")`
  runs every node it supports on cuopjit kernels, fused, and leaves the rest to torch;
- `compile(model, *example_inputs)` (see `fast_start`): the same backend on a graph captured by
  torch.fx.symbolic_trace instead of Dynamo, for a fast first result;
- `explain(model, *inputs)` and `last_report()` say which nodes ran where and which fusions were made.
"""
from __future__ import annotations

from .library import OPS, TorchOp, register
from .backend import compile_graph
from .fast_start import Compiled, compile
from .report import Explanation, Report, explain, last_report, reports

__all__ = ["OPS", "TorchOp", "register", "compile_graph", "compile", "Compiled", "explain", "last_report", "reports",
           "Explanation", "Report"]
