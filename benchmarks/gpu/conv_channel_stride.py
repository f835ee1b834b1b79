"""Convolutions whose channel count is not a multiple of 64 (issue 34: n64 c440 14x14 k440 1x1 ran 0.66x cuDNN, 3x3
convs of 96 channels 0.43-0.63x). A first probe (docs/device-runs/h200-mid-m-gemm/call7/odd_channels_probe.txt) found the input channels,
not the filters, set the cost: n64 c440 28x28 k440 took 80 us, c448 45 us, c448 k440 47 us; c888 14x14 238 us, c896
123 us. TMA reads each pixel's channels as a 128-byte box row; at 880- or 1776-byte strides those rows start off
32-byte sectors (a likely cause, not isolated: c672's 1344-byte stride, 32-byte aligned, ran 1.14x). Each shape here: the hero, then its tile on each activation path (TMA over the GEMM
view, TMA im2col, the cp.async gathering producer), each a full ``tracea bench`` (verified, then timed beside cuDNN).

    python benchmarks/gpu/conv_channel_stride.py [--match TEXT] [--part paths|strides|forms|cudnn] [--promotion L2_128B]

``--part strides`` runs the 1x1 hero over copies of x and the filter whose rows are C rounded up to 64 apart (each
operand, then both), ``--part forms`` other tiles and clusters, ``--part cudnn`` lists the kernels cuDNN runs.

Needs an sm_90 GPU and PyTorch.
"""

from __future__ import annotations

import argparse
import dataclasses

from tracea.doctor import probe
from tracea.emitters.bench import bench
from tracea.emitters.cuda.hopper.conv_heroes import conv_hero_schedule
from tracea.kernels import Conv2d


def conv(n: int, c: int, hw: int, k: int, r: int) -> Conv2d:
    return Conv2d(n, c, hw, hw, k, r, r, padding=r // 2, layout="nhwc", dtype="fp16")


SHAPES = [conv(64, 440, 28, 440, 1), conv(64, 448, 28, 448, 1), conv(64, 440, 14, 440, 1), conv(64, 888, 7, 888, 1),
          conv(64, 888, 14, 888, 1), conv(64, 1280, 7, 320, 1), conv(32, 96, 56, 96, 3), conv(32, 128, 56, 128, 3),
          conv(16, 48, 112, 48, 3), conv(16, 200, 28, 200, 3)]


def cell(op: object, host: object, s: object | None) -> str:
    """``tracea bench`` of ``op`` on the hero (``s`` None) or ``s``: "ratio/Tracea us", or the status."""
    variant = "cuda-wgmma.conv2d" if op.kind == "conv2d" else "cuda-wgmma.gemm"
    kw = {} if s is None else {"tuned": lambda _o, _v: s.to_json(), "variant": variant}
    r = bench(op, host, backend="cuda", repeats=30, **kw)
    if r.status != "ok" or r.tracea is None:
        return f"{r.status} {(r.error or '')[:60]}"
    return (f"{r.ratio:.3f}" if r.ratio is not None else "unstable") + f"/{r.tracea.p50_ms * 1000:.1f}"


def padded_maps(kern, a_pad: int, b_pad: int) -> None:
    """``kern`` (the gemm path's kernel object) reading x and the filter from copies whose rows are ``a_pad`` and
    ``b_pad`` channels apart (the copies made once, outside the timing): its upload wrapped."""
    from tracea.emitters.cuda import launches
    from tracea.emitters.cuda.hopper.conv_paths import gemm_view
    from tracea.emitters.cuda.tma import copy_2d, operand_maps

    op, base_upload = kern.op, type(kern).upload
    view, sched = gemm_view(op), kern.schedule

    def upload(inputs) -> None:
        base_upload(kern, inputs)
        drv, stream = kern._dev.driver, kern._dev.stream.handle
        ptr = {}
        for name, pad, rows in (("x", a_pad, op.gemm_m), ("weight", b_pad, op.k)):
            ptr[name] = int(kern._dbuf[name].ptr)
            if pad != op.c:
                buf = kern._zeroed(f"{name}_pad{pad}", rows * pad * 2)
                launches.memcpy2d(copy_2d(drv, ptr[name], op.c * 2, int(buf.ptr), pad * 2, op.c * 2, rows), stream)
                ptr[name] = int(buf.ptr)
        kern._dev.stream.sync()
        ma, mb = operand_maps(view, sched, ptr["x"], ptr["weight"], a_pad, b_pad)
        kern._wargs = [ma, mb, *kern._wargs[2:]]

    kern.upload = upload


def stride_rows(op: Conv2d, host: object) -> None:
    """The hero over x and the filter at their own row stride and at C rounded up to 64 (each, and both): which
    operand's stride costs. Each verified, then timed beside cuDNN (the copies are outside the timing)."""
    import numpy as np

    from tracea.emitters.cuda.build import build
    from tracea.emitters.device_baselines import time_torch, torch_baseline

    hero = conv_hero_schedule(op)
    if hero.path != "gemm":
        print(f"{op.signature}: the hero is not on the gemm path ({hero.name})")
        return
    inputs = op.random_inputs(np.random.default_rng(11))
    ref = op.reference(inputs)
    scale = float(np.abs(ref).max())
    v = time_torch(torch_baseline(op, inputs).run, 5, 30)
    pad = -(-op.c // 64) * 64
    for a_pad, b_pad in dict.fromkeys(((op.c, op.c), (pad, op.c), (op.c, pad), (pad, pad))):
        kern = build(op, "cuda-wgmma.conv2d", hero, host)
        padded_maps(kern, a_pad, b_pad)
        err = float(np.abs(kern(inputs).astype(np.float64) - ref).max()) / scale
        t = kern.time(inputs, warmup=5, repeats=30)
        print(f"n{op.n} c{op.c} {op.h}x{op.w} k{op.k}: x rows {a_pad * 2:>5} B, filter rows {b_pad * 2:>5} B | "
              f"err {err:.1e} {'ok' if err < 1e-2 else 'WRONG'} | {t.p50_ms * 1000:6.1f} us (p95 {t.p95_ms * 1000:6.1f})"
              f" | cuDNN {v.p50_ms * 1000:6.1f} us | ratio {v.p50_ms / t.p50_ms:.3f}", flush=True)


FORMS = [("cluster 2 (B shared)", {"cluster": 2}),
         ("128x256 c2", {"bm": 128, "bn": 256, "stages": 4, "consumers": 2, "pingpong": False}),
         ("128x256 c2 cluster 2", {"bm": 128, "bn": 256, "stages": 4, "consumers": 2, "pingpong": False, "cluster": 2}),
         ("192x128 c3", {"bm": 192, "bn": 128, "stages": 4, "consumers": 3, "pingpong": False}),
         ("128x128 cooperative", {"pingpong": False}),
         ("128x128 s8", {"stages": 8})]


def form_rows(op: Conv2d, host: object) -> None:
    """The hero beside other tiles and clusters on the gemm path (each a full ``bench``: verified, then timed)."""
    hero = conv_hero_schedule(op)
    cols = [f"hero {cell(op, host, None)}"]
    for label, change in FORMS:
        s = dataclasses.replace(hero, **{"path": "gemm", "swap": False, **change})
        try:
            s.validate(op)
        except Exception as exc:  # noqa: BLE001 - a form this op refuses prints as such
            cols.append(f"{label} refused ({str(exc)[:40]})")
            continue
        cols.append(f"{label} {cell(op, host, s)}")
    print(f"n{op.n} c{op.c} {op.h}x{op.w} k{op.k} {op.r}x{op.s} | " + " | ".join(cols), flush=True)


def cudnn_kernels(op: Conv2d) -> None:
    """The kernels cuDNN runs for ``op`` (torch's profiler over a few calls)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(op.n, op.c, op.h, op.w, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    w = torch.randn(op.k, op.c, op.r, op.s, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    for _ in range(3):
        torch.nn.functional.conv2d(x, w, padding=op.padding)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.nn.functional.conv2d(x, w, padding=op.padding)
        torch.cuda.synchronize()
    names = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})
    print(f"n{op.n} c{op.c} {op.h}x{op.w} k{op.k} {op.r}x{op.s} cuDNN: " + " ; ".join(n[:140] for n in names), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--match", default="")
    ap.add_argument("--part", default="paths", choices=("paths", "strides", "forms", "cudnn"),
                    help="paths: the hero on each activation path; strides: x and the filter read at C rounded up "
                         "to 64; forms: other tiles and clusters; cudnn: the kernels cuDNN runs")
    ap.add_argument("--promotion", default="", help="every tensor map's L2 promotion (NONE, L2_64B, L2_128B, L2_256B; "
                    "default: tma.promotion_for's rule)")
    a = ap.parse_args()
    if a.promotion:
        from tracea.emitters.cuda import tma

        tma.L2_PROMOTION = tma.OFF_LINE_PROMOTION = a.promotion
    host = probe()
    if a.part != "paths":
        for op in SHAPES:
            if a.match in op.signature and (a.part == "cudnn" or (op.r, op.s) == (1, 1)):
                {"strides": lambda o: stride_rows(o, host), "forms": lambda o: form_rows(o, host),
                 "cudnn": cudnn_kernels}[a.part](op)
        return 0
    print("conv | hero (name) | gemm | im2col | gather   [cells: ratio to cuDNN / Tracea us]", flush=True)
    for op in SHAPES:
        if a.match not in op.signature:
            continue
        hero = conv_hero_schedule(op)
        cols = [f"{cell(op, host, None)} ({hero.name})"]
        for path in ("gemm", "im2col", "gather"):
            s = dataclasses.replace(hero, path=path, swap=False, cluster=1, cluster_axis="m")
            try:
                s.validate(op)
            except Exception as exc:  # noqa: BLE001 - a path this op refuses prints as such
                cols.append(f"refused ({str(exc)[:40]})")
                continue
            cols.append("same" if s == hero else cell(op, host, s))
        print(f"n{op.n} c{op.c} {op.h}x{op.w} k{op.k} {op.r}x{op.s} | " + " | ".join(cols), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
