"""The CUDA backend's `tracea bench` suites (kernels/workloads.py) in the precisions GPU users run: bf16
GEMMs, fp16 NHWC convolutions at batch 1 and 32, fp16 softmax. ``quick``: a few rows of each."""

from __future__ import annotations

from typing import Any


def suites(quick: bool = False) -> dict[str, list[Any]]:
    from tracea.kernels import workloads as w

    if quick:
        return {"llm-gemm": w.llm_gemms("bf16", tokens=(1, 2048), projections=((4096, 4096),)),
                "resnet50": w.resnet50_convs("fp16", batches=(1,), shapes=(w.RESNET50[0], w.RESNET50[2],
                                                                             w.RESNET50[3])),
                "softmax": w.softmax_rows("fp16", attention_cols=(128, 8192), vocabulary=((1, 128256),))}
    return {"llm-gemm": w.llm_gemms("bf16"), "resnet50": w.resnet50_convs("fp16", batches=(1, 32)),
            "softmax": w.softmax_rows("fp16")}
