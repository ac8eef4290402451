"""PyTorch integration: `import cuopjit.torch` registers cuopjit's operators as `torch.ops.cuopjit.*`
(see `library`). The only package of cuopjit that imports torch."""
from __future__ import annotations

from .library import OPS, TorchOp, register

__all__ = ["OPS", "TorchOp", "register"]
