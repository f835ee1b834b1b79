"""Convolutions whose channel count is not a multiple of 64 (issue 34: n64 c440 14x14 k440 1x1 ran 0.66x cuDNN, 3x3
convs of 96 channels 0.43-0.63x). A first probe (docs/device-runs/h200-mid-m-gemm/call7/odd_channels_probe.txt) found the input channels,
not the filters, set the cost: n64 c440 28x28 k440 took 80 us, c448 45 us, c448 k440 47 us; c888 14x14 238 us, c896
123 us. TMA reads each pixel's channels as a 128-byte box row; at 880- or 1776-byte strides those rows start off
32-byte sectors (a likely cause, not isolated: c672's 1344-byte stride, 32-byte aligned, ran 1.14x). Each shape here: the hero, then its tile on each activation path (TMA over the GEMM
view, TMA im2col, the cp.async gathering producer), each a full ``tracea bench`` (verified, then timed beside cuDNN).

    python benchmarks/gpu/conv_channel_stride.py [--match TEXT]

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


def cell(op: Conv2d, host: object, s: object | None) -> str:
    kw = {} if s is None else {"tuned": lambda _o, _v: s.to_json(), "variant": "cuda-wgmma.conv2d"}
    r = bench(op, host, backend="cuda", repeats=30, **kw)
    if r.status != "ok" or r.tracea is None:
        return f"{r.status} {(r.error or '')[:60]}"
    return (f"{r.ratio:.3f}" if r.ratio is not None else "unstable") + f"/{r.tracea.p50_ms * 1000:.1f}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--match", default="")
    a = ap.parse_args()
    host = probe()
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
