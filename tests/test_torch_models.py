"""torchvision models through the "cuopjit" torch.compile backend against float64 eager (GPU).

ResNet-50, MobileNet-V2 and ViT-B/16 with random weights, each at batch 1 (224x224) and batch 32 (64x64
images, to keep the float64 reference and the compiles short; ViT-B/16 built for 64x64), in fp32 and TF32,
the CNNs at batch 32 in channels_last. The reference is the same model in float64 (eager, on the GPU); the
tolerance follows the precision: fp32 keeps 24 bits (unit roundoff 6e-8; over ~50 layers of sums of a few
thousand products the relative error stays near 1e-6, so 1e-4 leaves room), TF32 rounds the product's inputs
to 11 bits (4.9e-4 per operand, growing with depth to ~1e-3 as torch's own TF32 eager shows): 3e-2. Each
result must also stay within 10x torch eager's own error at the same precision (plus the fp32 floor).
"""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
ct = pytest.importorskip("cuopjit.torch")

from conftest import rel_error  # noqa: E402
from torch_support import tf32  # noqa: E402

TOLERANCE = {"fp32": 1e-4, "tf32": 3e-2}
FP32_FLOOR = 1e-6
# how far from eager's own error cuopjit's may be. TF32: the wgmma kernels read float32 activations as the tensor
# cores take them, truncated to TF32 (2^-10 per operand against rounding's 2^-11, and biased toward zero, so it
# adds up over ResNet-50's 53 convolutions: 7.0e-3 against eager's 6.6e-4 on H100, batch 32, channels_last);
# weights are rounded once when packed
FACTOR = {"fp32": 10, "tf32": 16}


def _model(name: str, size: int):
    tv = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    if name == "vit_b_16":
        model = tv.models.vit_b_16(image_size=size)
        torch.nn.init.normal_(model.heads.head.weight, std=0.02)   # it starts at zero: every output would be 0
        return model
    model = getattr(tv.models, name)()
    for m in model.modules():   # BatchNorm statistics of a trained network, not the identity of a fresh one
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5), m.running_var.uniform_(0.5, 2.0)
    return model


CASES = [  # model, batch, image size, precision, channels_last
    ("resnet50", 1, 224, "fp32", False), ("resnet50", 32, 64, "tf32", True),
    ("mobilenet_v2", 1, 224, "tf32", False), ("mobilenet_v2", 32, 64, "fp32", True),
    ("vit_b_16", 1, 224, "fp32", False), ("vit_b_16", 32, 64, "tf32", False),
]


@pytest.mark.gpu
@pytest.mark.parametrize("name, batch, size, precision, channels_last", CASES,
                         ids=[f"{c[0]}-b{c[1]}-{c[3]}{'-cl' if c[4] else ''}" for c in CASES])
def test_model_matches_float64_eager(name, batch, size, precision, channels_last):
    model = _model(name, size).cuda().eval()
    x = torch.randn(batch, 3, size, size, device="cuda")
    with torch.no_grad():
        ref = copy.deepcopy(model).double()(x.double())
        if channels_last:
            model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
        with tf32(precision == "tf32"):
            torch._dynamo.reset()
            compiled = torch.compile(model, backend="cuopjit")
            compiled(x)
            got = compiled(x)
            report = ct.last_report()
            eager = model(x)
    err, base = (rel_error(t.double().cpu().numpy(), ref.cpu().numpy()) for t in (got, eager))
    print(f"{name} b{batch} {precision}: rel error vs float64 cuopjit {err:.2e}, torch eager {base:.2e}\n{report}")
    assert err < TOLERANCE[precision] and err < FACTOR[precision] * base + FP32_FLOOR
    assert report.fallback is None and len(report.on_cuopjit) > 20
    if name == "resnet50" and precision == "fp32":   # every bottleneck's residual join: its last conv's epilogue
        assert sum("epilogue" in f for f in report.fusions) >= 16
    elif name == "resnet50":                           # on tensor cores a residual stays a program, said so
        assert sum("tensor-core convolution" in n for n in report.notes) >= 16
    assert any("kernels built" in n for n in report.notes)
