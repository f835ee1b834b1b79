"""What bench_cuda.py and bench_cuda_space.py check and time Tracea's CUDA kernels against, on the same GPU:
PyTorch's own kernel for an op (``torch_call``: cuBLAS, cuDNN, torch.softmax, TF32 off) and the reference
of an output (``reference``: the IR's float64 for small shapes, PyTorch in float64, or fp32 for the large
convolutions); ``HOST``, the host report every build here uses (the GPU is read from cuda-core).
"""

from __future__ import annotations

import numpy as np

from tracea.emitters.baselines import torch_math
from tracea.kernels.dtypes import to_float64
from tracea.kernels.epilogue import apply as apply_epilogue


class _NoGpuHost:  # build() reads the GPU from cuda-core when the host report has none
    nvidia = None


HOST = _NoGpuHost()


def configured_torch():
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    return torch


def to_torch(x: np.ndarray, dtype: str):
    torch = configured_torch()
    if dtype == "bf16":
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16).cuda()
    return torch.from_numpy(np.ascontiguousarray(x)).cuda()


def torch_call(op, inputs: dict[str, np.ndarray], ref_dtype=None):
    """(callable, output) of PyTorch's own kernel for ``op`` (or, with ``ref_dtype``, a reference)."""
    torch = configured_torch()
    F = torch.nn.functional
    t = {k: to_torch(v, op.dtype.value) for k, v in inputs.items()}
    if ref_dtype is not None:
        t = {k: v.to(ref_dtype) for k, v in t.items()}
    if op.kind == "gemm":
        a = t["a"] if op.layout_a == "row" else t["a"].t()
        b = t["b"] if op.layout_b == "row" else t["b"].t()

        math = torch_math(torch)

        def fn():
            return apply_epilogue(op.epilogue, a @ b, t, op.alpha, math)
    elif op.kind == "conv2d":
        x, w = t["x"], t["weight"]
        if op.layout == "nhwc":
            x, w = x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2)  # channels_last views, no copy

        def fn():
            y = F.conv2d(x, w, t.get("bias"), stride=op.stride, padding=op.padding, dilation=op.dilation,
                         groups=op.groups)
            return y.permute(0, 2, 3, 1) if op.layout == "nhwc" else y
    else:
        def fn():
            return torch.softmax(t["x"], dim=1)
    return fn


def reference(op, inputs):
    """float64 reference: the IR's own for small shapes, PyTorch on the GPU for large ones."""
    work = op.flops
    if work < 2e9:
        return op.reference(inputs), "float64 (IR reference)"
    torch = configured_torch()
    if op.kind == "conv2d" and work > 2e10:
        y = torch_call(op, inputs, torch.float32)()
        return y.double().cpu().numpy(), "fp32 PyTorch (TF32 off)"
    y = torch_call(op, inputs, torch.float64)()
    return y.cpu().numpy(), "float64 PyTorch"


def out_f64(op, y: np.ndarray) -> np.ndarray:
    return to_float64(y, op.dtype)
