"""Helpers of the torch test files (imported by them only: the CPU suite runs without torch)."""
import contextlib

import torch


@contextlib.contextmanager
def tf32(enabled: bool):
    """torch's TF32 switches for cuBLAS and cuDNN set to `enabled` inside the block, restored after."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def capture(model, *inputs):
    """The first FX graph Dynamo makes of `model` under no_grad, and its example inputs."""
    graphs = []
    torch._dynamo.reset()

    def keep(gm, example_inputs):
        graphs.append((gm, list(example_inputs)))
        return gm.forward
    with torch.no_grad():
        torch.compile(model, backend=keep)(*inputs)
    return graphs[0]
