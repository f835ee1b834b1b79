"""The Hopper implicit-GEMM conv (cuda-wgmma.conv2d) on the GPU: verify, then time against cuDNN, in one go.

    PYTHONUNBUFFERED=1 python3 benchmarks/gpu/wgmma_conv_run.py [--out DIR] [--reps 30] [--smoke]

Runs from a plain checkout on the GPU machine (its python3 with torch, cuda-bindings, NVRTC); it loads
benchmarks/gpu/wgmma_run.py for the package mapping, the NVRTC compile, SASS counts and the interleaved timer.

1. smoke (``--smoke``, run first in a child process with a time limit by the parent): one small conv.
2. verify: schedules x odd shapes (C not a multiple of 8, stride 2, dilation 2, 1x1, N*P*Q and K not
   multiples of the tile, bias) x fp16/bf16 on fresh random inputs, output poisoned with NaN first,
   relative error against torch's conv2d in float64 on the GPU, bound ``tolerance(op)`` from the IR;
   and once through the emitter (``cuda.build`` -> WgmmaConvKernel) against the IR's numpy reference.
3. bench: the issue-4 shapes; each candidate verified again on the timed inputs, then timed interleaved
   with cuDNN (torch.nn.functional.conv2d, ``cudnn.benchmark`` on, channels-last = NHWC tensors, the
   same dtype), CUDA events, L2 flushed before every call, warm-up, median and p95.
Records go to DIR/*.json; a short table is printed last.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("wgmma_run", ROOT / "benchmarks" / "gpu" / "wgmma_run.py")
R = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(R)  # maps tracea onto the source folders when it is not installed

from tracea.emitters.cuda import tma as T  # noqa: E402
from tracea.emitters.cuda.hopper import conv as WC  # noqa: E402
from tracea.kernels import Conv2d, tolerance  # noqa: E402

S = WC.WgmmaConvSchedule
VERIFY_SCHEDULES = [S(bm=128, bn=128, stages=6, consumers=2, store="tma"), S(bm=128, bn=256, stages=4, consumers=2,
                    store="tma"), S(bm=256, bn=128, stages=4, consumers=2), S(bm=128, bn=128, stages=6, consumers=2,
                    pingpong=True, store="tma"), S(bm=64, bn=128, stages=5, consumers=1), S(bm=128, bn=64, stages=3,
                    consumers=1, store="tma"), S(bm=128, bn=256, stages=4, consumers=2, store="tma", publish="noinc"),
                    S(bm=128, bn=128, stages=6, consumers=2, pingpong=True, store="tma", publish="noinc"),
                    S(bm=64, bn=128, stages=5, consumers=1, publish="noinc")]


def conv(n, c, h, w, k, r=3, s=3, stride=1, pad=1, dil=1, bias=False, dtype="fp16") -> Conv2d:
    return Conv2d(n=n, c=c, h=h, w=w, k=k, r=r, s=s, stride=(stride, stride), padding=(pad, pad),
                  dilation=(dil, dil), layout="nhwc", bias=bias, dtype=dtype)


ODD = [conv(2, 3, 33, 31, 24, bias=True),                       # C = 3: channels padded to 8
       conv(3, 40, 29, 27, 72, stride=2, bias=True, dtype="bf16"),  # stride 2, C 40 (partial 64-block)
       conv(2, 64, 20, 22, 136, pad=2, dil=2),                  # dilation 2
       conv(5, 128, 7, 7, 200, r=1, s=1, pad=0, dtype="bf16"),  # 1x1, N*P*Q = 245
       conv(1, 96, 15, 13, 70, r=5, s=5, stride=2, pad=1, bias=True),  # K = 70: direct stores (K % 8)
       conv(4, 20, 9, 11, 40, r=3, s=2, stride=(1), pad=0, dtype="bf16")]
TARGETS = [conv(1, 64, 224, 224, 128), conv(1, 64, 224, 224, 128, dtype="bf16"), conv(32, 256, 56, 56, 256)]
BENCH_SCHEDULES = [S(bm=128, bn=128, stages=6, consumers=2, store="tma"), S(bm=128, bn=256, stages=4, consumers=2,
                   store="tma"), S(bm=256, bn=128, stages=4, consumers=2, store="tma"), S(bm=128, bn=128, stages=6,
                   consumers=2, pingpong=True, store="tma"), S(bm=128, bn=256, stages=4, consumers=2),
                   S(bm=128, bn=128, stages=6, consumers=2, raster="n", store="tma")]
BENCH_SCHEDULES += [dataclasses.replace(s, publish="noinc") for s in BENCH_SCHEDULES if s.store == "tma"]
BENCH_SCHEDULES += [S(bm=128, bn=192, stages=4, consumers=2, store="tma", publish="noinc"),
                    S(bm=128, bn=192, stages=5, consumers=2, publish="noinc"),
                    S(bm=128, bn=256, stages=4, consumers=2, raster="n", store="tma", publish="noinc")]


class Kernel:
    def __init__(self, op: Conv2d, sched: WC.WgmmaConvSchedule, cache: dict) -> None:
        src = WC.render(op, sched)
        if src not in cache:
            t0 = time.perf_counter()
            cubin, log = R.compile_source(src, sched.name)
            cache[src] = (cubin, log, time.perf_counter() - t0, R.sass_counts(cubin))
        self.cubin, self.log, self.compile_s, self.sass = cache[src]
        self.op, self.sched = op, sched
        self.launcher = T.Launcher(self.cubin, WC.KERNEL_NAME, sched.smem_bytes)
        self.regs = self.launcher.attribute("NUM_REGS")
        self.local = self.launcher.attribute("LOCAL_SIZE_BYTES")

    def prepare(self, ins: dict, out, sm_count: int):
        """The call on torch tensors: x (N,H,W,C), weight (K,R,S,C) contiguous; pads channels to 8 inside."""
        import ctypes
        import types

        import torch

        op, sched = self.op, self.sched
        cp = WC.channels_padded(op)
        x, wt = ins["x"], ins["weight"]
        if cp != op.c:
            xp = torch.zeros((op.n, op.h, op.w, cp), dtype=x.dtype, device=x.device)
            wp = torch.zeros((op.k, op.r, op.s, cp), dtype=x.dtype, device=x.device)
        else:
            xp, wp = x, wt
        mb = WC.filter_map(op, sched, wp.data_ptr())
        mc, store_tma = T.output_map(types.SimpleNamespace(n=op.k, m=op.gemm_m, dtype=op.dtype), sched,
                                     out.data_ptr())
        bias = ins.get("bias")
        ints = {**WC.conv_scalars(op), "store_tma": store_tma}
        args = [mb, mc, ctypes.c_uint64(xp.data_ptr()), ctypes.c_uint64(out.data_ptr()),
                ctypes.c_uint64(bias.data_ptr() if bias is not None else 0),
                *[ctypes.c_int(ints[k]) for k in WC.INT_PARAMS]]
        grid, threads, _ = WC.launch_geometry(op, sched, sm_count)
        stream = torch.cuda.current_stream().cuda_stream

        def call() -> None:
            if cp != op.c:  # inside the timed call
                xp[..., : op.c].copy_(x)
                wp[..., : op.c].copy_(wt)
            self.launcher.launch(grid, threads, stream, args)

        return call


def _compile(src_name: tuple[str, str]) -> tuple[str, tuple]:
    src, name = src_name
    t0 = time.perf_counter()
    cubin, log = R.compile_source(src, name)
    return src, (cubin, log, time.perf_counter() - t0, R.sass_counts(cubin))


def precompile(cache: dict) -> None:
    """Every source the run needs, compiled by NVRTC in parallel processes (device time is scarce)."""
    from concurrent.futures import ProcessPoolExecutor

    jobs = {}
    for op in ODD:
        for dtype in ("fp16", "bf16"):
            for sched in VERIFY_SCHEDULES:
                o = dataclasses.replace(op, dtype=dtype)
                jobs[WC.render(o, sched)] = sched.name
    for op in TARGETS:
        for sched in BENCH_SCHEDULES:
            jobs[WC.render(op, sched)] = sched.name
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=min(14, os.cpu_count() or 4)) as pool:
        for src, entry in pool.map(_compile, list(jobs.items())):
            cache[src] = entry
    print(f"precompiled {len(jobs)} kernels in {time.perf_counter() - t0:.1f} s")


def make_inputs(op: Conv2d, gen) -> dict:
    import torch

    dt = R.torch_dtype(op.dtype.value)
    scale = 1.0 / math.sqrt(math.sqrt(op.gemm_k))
    ins = {}
    for name, shape in op.shapes().items():
        s = 1.0 if name == "bias" else scale
        ins[name] = (torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32) * s).to(dt).contiguous()
    return ins


def reference(op: Conv2d, ins):
    """float64 on the GPU, NHWC out."""
    import torch.nn.functional as F

    x = ins["x"].double().permute(0, 3, 1, 2)
    w = ins["weight"].double().permute(0, 3, 1, 2)
    b = ins["bias"].double() if "bias" in ins else None
    y = F.conv2d(x, w, b, stride=op.stride, padding=op.padding, dilation=op.dilation)
    return y.permute(0, 2, 3, 1).contiguous()


def cudnn_call(op: Conv2d, ins):
    """cuDNN on the same NHWC data (channels-last tensors), the same dtype; returns (call, output)."""
    import torch.nn.functional as F

    x = ins["x"].permute(0, 3, 1, 2)  # a channels-last view: no copy
    w = ins["weight"].permute(0, 3, 1, 2)
    b = ins.get("bias")
    box = {}

    def call() -> None:
        box["y"] = F.conv2d(x, w, b, stride=op.stride, padding=op.padding, dilation=op.dilation)

    return call, box


def out_tensor(op: Conv2d):
    import torch

    return torch.full((op.n, op.p, op.q, op.k), float("nan"), dtype=R.torch_dtype(op.dtype.value), device="cuda")


def run_one(op, sched, ins, ref, cache, sm_count) -> dict:
    import torch

    rec = {"op": op.signature, "schedule": sched.name}
    try:
        k = Kernel(op, sched, cache)
        rec.update(regs=k.regs, local=k.local, sass=k.sass)
        out = out_tensor(op)
        call = k.prepare(ins, out, sm_count)
        call()
        torch.cuda.synchronize()
        err = R.rel_err(out, ref)
        rec.update(rel_err=err, ok=err <= tolerance(op), tol=tolerance(op))
        rec["_call"] = call
    except Exception as exc:  # noqa: BLE001 - a failing candidate is a recorded result
        rec.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:1500])
    return rec


def run_smoke(sm_count: int) -> int:
    import torch

    gen = torch.Generator(device="cuda")
    gen.manual_seed(int(time.time()))
    op = conv(2, 64, 12, 10, 64, bias=True)
    ins = make_inputs(op, gen)
    rec = run_one(op, VERIFY_SCHEDULES[0], ins, reference(op, ins), {}, sm_count)
    rec.pop("_call", None)
    print("smoke", json.dumps(rec, default=str))
    return 0 if rec.get("ok") else 1


def run_verify(sm_count: int, cache: dict) -> list[dict]:
    import torch

    gen = torch.Generator(device="cuda")
    gen.manual_seed(int(time.time()) + 7)
    recs = []
    for op in ODD:
        for dtype in ("fp16", "bf16"):
            o = dataclasses.replace(op, dtype=dtype)
            ins = make_inputs(o, gen)
            ref = reference(o, ins)
            for sched in VERIFY_SCHEDULES:
                rec = run_one(o, sched, ins, ref, cache, sm_count)
                rec.pop("_call", None)
                print(f"verify {o.signature[:70]:70s} {sched.name:36s} "
                      + (f"err {rec['rel_err']:.2e} {'ok' if rec['ok'] else 'WRONG'}" if "rel_err" in rec
                         else rec.get("error", "")))
                recs.append(rec)
    return recs


def run_integrated() -> list[dict]:
    """Through the emitter's own path: cuda.build -> WgmmaConvKernel (numpy in and out, IR reference),
    NHWC and NCHW (NCHW: transposes inside every launch). The NCHW issue-4 shapes are also timed:
    ``kernel.time`` (its own stream, L2 flushed, events) against cuDNN on NCHW tensors in this process."""
    import importlib

    import numpy as np
    import torch

    from tracea.kernels import relative_error
    from tracea.kernels.dtypes import to_float64

    build = importlib.import_module("tracea.emitters.cuda.build")
    recs = []
    rng = np.random.default_rng(int(time.time()))
    nchw = [dataclasses.replace(o, layout="nchw") for o in (ODD[0], ODD[1], ODD[4], TARGETS[0], TARGETS[2])]
    for op in (ODD[0], ODD[1], conv(1, 64, 56, 56, 128, bias=True), conv(2, 32, 20, 20, 256, bias=True, dtype="bf16"),
               *nchw):
        rec = {"op": op.signature, "path": "cuda.build"}
        try:
            sched = build.hero_schedule(op, "cuda-wgmma.conv2d", None)
            kern = build.build(op, "cuda-wgmma.conv2d", sched, None)
            ins = op.random_inputs(rng)
            out = kern(ins)
            err = relative_error(to_float64(out, op.dtype), op.reference(ins))  # bf16 is stored as uint16 bits
            rec.update(schedule=sched.name, rel_err=err, ok=err <= tolerance(op))
            if op in TARGETS or dataclasses.replace(op, layout="nhwc") in TARGETS:
                t = kern.time(ins, warmup=5, repeats=30)
                rec.update(ms=t.p50_ms, p95=t.p95_ms)
                rec.update(_cudnn(op, ins))
                rec["ratio"] = rec["cudnn_ms"] / rec["ms"]
        except Exception as exc:  # noqa: BLE001
            rec.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:1500])
        print("integrated", json.dumps(rec, default=str))
        recs.append(rec)
        torch.cuda.synchronize()
    return recs


def _cudnn(op: Conv2d, ins_np: dict) -> dict:
    """cuDNN on ``op``'s own layout (the numpy inputs uploaded), timed alone: L2 flushed, events, median."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    dt = R.torch_dtype(op.dtype.value)
    # 16-bit storage (bf16 as uint16 bits) moved as int16 and reinterpreted on the GPU
    t = {k: torch.from_numpy(np.ascontiguousarray(v).view(np.int16)).cuda().view(dt) for k, v in ins_np.items()}
    x, w, b = t["x"], t["weight"], t.get("bias")
    if op.layout == "nhwc":
        x, w = x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2)
    flush = torch.empty(512 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    ms = []
    for i in range(35):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        F.conv2d(x, w, b, stride=op.stride, padding=op.padding, dilation=op.dilation)
        e.record()
        e.synchronize()
        if i >= 5:
            ms.append(s.elapsed_time(e))
    return {"cudnn_ms": statistics.median(ms), "cudnn_p95": R.pct(ms, 0.95)}


def run_bench(sm_count: int, cache: dict, reps: int, bad: set[str]) -> list[dict]:
    import torch

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    flush_buf = torch.empty(512 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(int(time.time()) + 1)
    recs = []
    for op in TARGETS:
        ins = make_inputs(op, gen)
        ref = reference(op, ins)
        cudnn, box = cudnn_call(op, ins)
        for _ in range(3):
            cudnn()
        torch.cuda.synchronize()
        err_cudnn = R.rel_err(box["y"].permute(0, 2, 3, 1), ref)
        best = None
        for sched in BENCH_SCHEDULES:
            if sched.name in bad:
                continue
            rec = run_one(op, sched, ins, ref, cache, sm_count)
            rec["err_cudnn"] = err_cudnn
            call = rec.pop("_call", None)
            if rec.get("ok"):
                ours, theirs = R.time_pair(call, cudnn, flush_buf.zero_, reps, 5)
                med, med_c = statistics.median(ours), statistics.median(theirs)
                rec.update(ms=med, p95=R.pct(ours, 0.95), cudnn_ms=med_c, cudnn_p95=R.pct(theirs, 0.95),
                           ratio=med_c / med, tflops=op.flops / med / 1e9, cudnn_tflops=op.flops / med_c / 1e9)
            print(f"bench {op.signature[:60]:60s} {sched.name:36s} "
                  + (f"{rec['ms']:.4f} ms (p95 {rec['p95']:.4f}) cuDNN {rec['cudnn_ms']:.4f} -> {rec['ratio']:.3f}x "
                     f"err {rec['rel_err']:.1e} (cuDNN {err_cudnn:.1e})" if "ms" in rec
                     else rec.get("error", f"WRONG err {rec.get('rel_err')}")))
            recs.append(rec)
            if "ms" in rec and (best is None or rec["ratio"] > best["ratio"]):
                best = rec
        if best is not None:
            best["best"] = True
    return recs


def main() -> int:
    args = _args()
    if args.compile_only:
        return compile_only()
    import torch
    from cuda.bindings import driver as drv

    torch.cuda.init()
    torch.empty(1, device="cuda")
    drv.cuInit(0)
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    if args.smoke:
        return run_smoke(sms)
    if args.memcheck:
        return run_memcheck(sms)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    head = {"device": props.name, "sm_count": sms, "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version()}
    print(json.dumps(head))
    smoke_ok = smoke_in_child()
    result = {"head": head, "smoke_ok": smoke_ok}
    if not smoke_ok:
        (out_dir / "conv.json").write_text(json.dumps(result, indent=1, default=str))
        return 1
    cache = {}
    precompile(cache)
    result["verify"] = run_verify(sms, cache)
    (out_dir / "conv.json").write_text(json.dumps(result, indent=1, default=str))
    bad = {r["schedule"] for r in result["verify"] if not r.get("ok")}
    result["bench"] = run_bench(sms, cache, args.reps, bad)
    (out_dir / "conv.json").write_text(json.dumps(result, indent=1, default=str))
    result["integrated"] = run_integrated()
    (out_dir / "conv.json").write_text(json.dumps(result, indent=1, default=str))
    summary(result, cache)
    return 0


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/wgmma_conv_out"))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--memcheck", action="store_true")
    ap.add_argument("--compile-only", action="store_true", help="NVRTC only (no GPU): ptxas figures")
    return ap.parse_args()


def compile_only() -> int:
    """Every schedule through NVRTC, no GPU: ptxas's registers and spills."""
    cache: dict = {}
    precompile(cache)
    for _cubin, log, _, _ in cache.values():
        print(" | ".join(x.strip() for x in log.splitlines() if "registers" in x or "spill" in x or "C75" in x))
    return 0


def run_memcheck(sms: int) -> int:
    """Under compute-sanitizer: the odd shapes, both publish modes, one launch each."""
    import torch

    bad = 0
    for sched in (VERIFY_SCHEDULES[0], VERIFY_SCHEDULES[6]):
        for op in ODD[:2]:
            gen = torch.Generator(device="cuda")
            gen.manual_seed(int(time.time()))
            ins = make_inputs(op, gen)
            rec = run_one(op, sched, ins, reference(op, ins), {}, sms)
            rec.pop("_call", None)
            print("memcheck run", sched.name, op.signature, rec.get("rel_err"), rec.get("ok"), rec.get("error", ""))
            bad += not rec.get("ok")
    return 1 if bad else 0


def smoke_in_child() -> bool:
    """The smoke run in a child process with a time limit: a hang in the first kernel must not take the
    whole run with it."""
    try:
        smoke = subprocess.run([sys.executable, __file__, "--smoke"], capture_output=True, text=True, timeout=90)
        print(smoke.stdout[-3000:], smoke.stderr[-3000:])
        return smoke.returncode == 0
    except subprocess.TimeoutExpired:
        print("smoke: timed out (hang?)")
        return False


def summary(result: dict, cache: dict) -> None:
    """ptxas's register and spill lines, the integrated runs, the verify count and the best of each shape."""
    for log in {v[1] for v in cache.values()}:
        for line in log.splitlines():
            if "registers" in line or "spill" in line or "C7508" in line:
                print("ptxas:", line.strip())
    nv = sum(1 for r in result["verify"] if r.get("ok"))
    for r in result["integrated"]:
        if "ratio" in r:
            print(f"integrated {r['op'][:70]} {r['schedule']}: {r['ms']:.4f} ms (p95 {r['p95']:.4f}) "
                  f"cuDNN {r['cudnn_ms']:.4f} (p95 {r['cudnn_p95']:.4f}) -> {r['ratio']:.3f}x")
    print(f"\nverify: {nv} of {len(result['verify'])} within tolerance; "
          f"integrated: {sum(1 for r in result['integrated'] if r.get('ok'))} of {len(result['integrated'])}")
    print("op                                                           schedule                             "
          "ours ms  p95     cuDNN ms  p95    ratio  TFLOP/s cuDNN")
    for r in result["bench"]:
        if r.get("best"):
            print(f"{r['op'][:60]:60s} {r['schedule']:36s} {r['ms']:7.4f} {r['p95']:7.4f} {r['cudnn_ms']:8.4f} "
                  f"{r['cudnn_p95']:7.4f} {r['ratio']:6.3f} {r['tflops']:6.1f} {r['cudnn_tflops']:6.1f}")


if __name__ == "__main__":
    sys.exit(main())
