"""The CPU backend's `tracea bench` suites (kernels/workloads.py) in fp32, the dtype CPU users run, sized
for a CPU: the LLM projections at decode and short prefill (M = 1, 16, 128), ResNet-50 at batch 1, softmax
over 4M-element row sets. ``quick``: a few rows of each, seconds on a 2-core CI machine."""

from __future__ import annotations

from typing import Any


def suites(quick: bool = False) -> dict[str, list[Any]]:
    from tracea.kernels import workloads as w

    if quick:
        return {"llm-gemm": w.llm_gemms("fp32", tokens=(1, 16), projections=((4096, 4096),)),
                "resnet50": w.resnet50_convs("fp32", batches=(1,), shapes=(w.RESNET50[2], w.RESNET50[13])),
                "softmax": w.softmax_rows("fp32", attention_cols=(1024,), vocabulary=((1, 32000),),
                                          elements=1 << 22)}
    return {"llm-gemm": w.llm_gemms("fp32", tokens=(1, 16, 128)),
            "resnet50": w.resnet50_convs("fp32", batches=(1,)),
            "softmax": w.softmax_rows("fp32", elements=1 << 22)}
