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
