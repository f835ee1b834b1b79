"""Which kernels torch's 8-bit GEMMs launch on this GPU (issue 35): the cuBLASLt kernel names (their tile, cluster
and schedule are in the name) and device times of ``torch._scaled_mm`` (default and fast accumulation, row and
tensor scales, block-scaled) and of the bf16 matmul, per shape, from ``torch.profiler``:

    python benchmarks/gpu/scaled_gemm_vendor_kernels.py [MxNxK ...]      # default: 2048x4096x4096 8192x4096x4096

A reading aid for choosing Tracea's tiles, not a comparison: the comparisons are ``scaled_gemm_gpu.py``'s."""

from __future__ import annotations

import sys
from collections import defaultdict


def calls_for(torch, m: int, n: int, k: int) -> dict:
    """The torch calls of one shape, on fresh FP8 operands (B k x n column-major, as cuBLASLt's FP8 GEMM reads it)."""
    dev = "cuda"
    a = (torch.randn(m, k, device=dev) * 0.5).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device=dev) * 0.5).to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(m, 1, device=dev) + 0.5, torch.rand(1, n, device=dev) + 0.5
    one = torch.ones((), device=dev)
    kb = k // 128
    ba = (torch.rand(m, kb, device=dev) + 0.5).t().contiguous().t()
    pad = torch.zeros(-(-n // 128), -(-kb // 4) * 4, device=dev)
    pad[:, :kb] = torch.rand(-(-n // 128), kb, device=dev) + 0.5
    a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)
    bf16 = torch.bfloat16
    return {
        "row default": lambda: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=bf16),
        "row fast": lambda: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=bf16, use_fast_accum=True),
        "tensor default": lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=bf16),
        "block128": lambda: torch._scaled_mm(a, b, scale_a=ba, scale_b=pad.t(), out_dtype=bf16),
        "bf16 matmul": lambda: a16 @ b16,
    }


def main() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    shapes = [tuple(int(x) for x in s.split("x")) for s in sys.argv[1:]] or [(2048, 4096, 4096), (8192, 4096, 4096)]
    print(torch.cuda.get_device_name(), "torch", torch.__version__, torch.version.cuda)
    for m, n, k in shapes:
        for label, call in calls_for(torch, m, n, k).items():
            try:
                for _ in range(5):
                    call()
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(20):
                        call()
                    torch.cuda.synchronize()
            except (RuntimeError, ValueError) as exc:  # a form this torch refuses
                print(f"{m}x{n}x{k} {label:<15} refused: {str(exc).splitlines()[0][:120]}")
                continue
            times: dict[str, list[float]] = defaultdict(list)
            for e in prof.events():
                if e.device_type.name == "CUDA":
                    times[e.name].append(e.device_time)
            for name, ts in sorted(times.items(), key=lambda kv: -sum(kv[1])):
                us = sorted(ts)[len(ts) // 2]
                tf = 2 * m * n * k / (us * 1e-6) / 1e12 if "gemm" in name.lower() or "xmma" in name.lower() else 0
                print(f"{m}x{n}x{k} {label:<15} {len(ts):>3} x {us:8.1f} us {tf:6.0f} TF/s  {name[:200]}")


if __name__ == "__main__":
    main()
