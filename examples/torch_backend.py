"""PyTorch models on cuopjit kernels through torch.compile: a ResNet-50 and a transformer encoder layer.

    python examples/torch_backend.py        # needs a GPU, torch (and torchvision for the ResNet)

`import cuopjit.torch` registers the backend "cuopjit"; `torch.compile(model, backend="cuopjit")` runs every
node it supports on cuopjit kernels (conv + BatchNorm + ReLU fused, biases, residual adds and activations in the
product's epilogue or one elementwise kernel, linear / matmul / softmax / layer_norm / pools) and leaves the rest
to torch. The models
run in eval mode under torch.no_grad(): the backend is for inference. `cuopjit.torch.explain` shows what ran
where. Each model's output is compared with torch eager, and both are timed.
"""
from __future__ import annotations

import time

import torch

import cuopjit.torch


def timed(fn, x, rounds: int = 30) -> float:
    """Milliseconds per call (after a warm-up)."""
    for _ in range(3):
        fn(x)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(rounds):
        fn(x)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / rounds * 1e3


def run(name: str, model: torch.nn.Module, x: torch.Tensor, **options) -> None:
    model = model.cuda().eval()
    x = x.cuda()
    with torch.no_grad():
        explanation = cuopjit.torch.explain(model, x, **options)      # compiles, runs once, reports
        print(explanation.reports[0].summary())
        compiled = torch.compile(model, backend="cuopjit", options=options or None)
        out, ref = compiled(x), model(x)
        error = ((out - ref).norm() / ref.norm()).item()
        print(f"{name}: relative difference to torch eager {error:.1e}; eager {timed(model, x):.2f} ms, "
              f"cuopjit {timed(compiled, x):.2f} ms per call")


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("this example needs an NVIDIA GPU")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True   # TF32 products, as torch
    try:
        import torchvision
    except ImportError:
        print("torchvision is not installed: skipping ResNet-50")
    else:
        run("resnet50, batch 1, CUDA graph", torchvision.models.resnet50(), torch.randn(1, 3, 224, 224),
            cuda_graphs=True)
    layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True)
    run("transformer encoder layer, 8 x 512 tokens", layer, torch.randn(8, 512, 768))


if __name__ == "__main__":
    main()
