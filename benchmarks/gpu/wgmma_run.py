"""The Hopper GEMM on the GPU: TMA swizzle probe, verification, timing against cuBLAS, in one go.

    PYTHONUNBUFFERED=1 python3 benchmarks/gpu/wgmma_run.py --phase probe|verify|bench [--out DIR] [--quick]

Runs from a plain checkout on the GPU machine (its python3 with torch, cuda-bindings and NVRTC; tracea
itself need not be installed: ``_import_tracea`` maps the source folders onto the package names).

- probe: TMA-loads a 64 x 64 tile whose elements are their own indices with the 128B swizzle and
  checks every element landed where ``TileLayout(64, 64, 2, swizzle=TmaSwizzle("128B")).offset`` says.
- verify: renders, compiles (NVRTC, sm_90a) and runs schedules x shapes x layouts x dtypes x epilogues on
  fresh random inputs (never zeros; output poisoned with NaN first), relative error against a float64
  reference (cuBLAS DGEMM on the GPU, epilogue in float64), bound ``tolerance(op)`` from the IR.
- bench: per shape, each candidate schedule verified once more on the timed inputs, then timed
  interleaved with torch.matmul (cuBLAS) with CUDA events: warm-up, L2 flushed before every call
  (a 512 MiB buffer zeroed outside the timed region), median and p95 of ``--reps`` calls.
Full records go to ``DIR/*.json``; a short table is printed last.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _import_tracea() -> None:
    try:
        import tracea.emitters.cuda.hopper  # noqa: F401
        return
    except ImportError:
        pass
    root = types.ModuleType("tracea")
    root.__path__ = [str(ROOT / "tracea_cli")]
    sys.modules["tracea"] = root
    for sub in ("doctor", "kernels", "emitters", "reports"):
        spec = importlib.util.spec_from_file_location(f"tracea.{sub}", ROOT / sub / "__init__.py",
                                                      submodule_search_locations=[str(ROOT / sub)])
        mod = importlib.util.module_from_spec(spec)
        sys.modules[f"tracea.{sub}"] = mod
        spec.loader.exec_module(mod)


_import_tracea()

from tracea.emitters.cuda import hopper as W  # noqa: E402
from tracea.emitters.cuda import tma as T  # noqa: E402
from tracea.emitters.layout import TileLayout, TmaSwizzle  # noqa: E402
from tracea.kernels import Gemm, tolerance  # noqa: E402


def compile_source(src: str, name: str) -> tuple[bytes, str]:
    """NVRTC (cuda.bindings) -> cubin for sm_90a, with ptxas's -v report."""
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(src.encode(), f"{name}.cu".encode(), 0, [], [])
    opts = [b"-arch=sm_90a", b"-std=c++17", b"--ptxas-options=-v"]
    (res,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    _, size = nvrtc.nvrtcGetProgramLogSize(prog)
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, log)
    log = log.decode(errors="replace").replace("\x00", "")
    if int(res) != 0:
        raise RuntimeError(f"NVRTC failed on {name}:\n{log[-3000:]}")
    _, size = nvrtc.nvrtcGetCUBINSize(prog)
    cubin = b" " * size
    nvrtc.nvrtcGetCUBIN(prog, cubin)
    return cubin, log


def sass_counts(cubin: bytes) -> dict[str, int]:
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        out = subprocess.run(["cuobjdump", "--dump-sass", f.name], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    finally:
        os.unlink(f.name)
    return {k: out.count(k) for k in ("HGMMA", "UTMALDG", "SYNCS", "USETMAXREG", "LDL", "STL", "HMMA")}


# ------------------------------------------------------------------------------------------- torch side


def torch_dtype(name: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}[name]


def make_inputs(op: Gemm, gen):
    import torch

    dt = torch_dtype(op.dtype.value)
    scale = 1.0 / math.sqrt(math.sqrt(op.k))
    ins = {}
    for name, shape in op.shapes().items():
        s = scale if name in ("a", "b") else 1.0
        ins[name] = (torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32) * s).to(dt)
    return ins


def reference(op: Gemm, ins):
    import torch

    a = ins["a"].double()
    b = ins["b"].double()
    a = a if op.layout_a == "row" else a.t()
    b = b if op.layout_b == "row" else b.t()
    c = a @ b
    for e in op.epilogue:
        if e == "bias":
            c = c + ins["bias"].double()[None, :]
        elif e == "relu":
            c = torch.clamp_min(c, 0.0)
        elif e == "gelu":
            c = 0.5 * c * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (c + 0.044715 * c**3)))
        elif e == "scale":
            c = c * op.alpha
        elif e == "residual":
            c = c + ins["residual"].double()
    return c


def rel_err(out, ref) -> float:
    import torch

    o = out.double()
    if not bool(torch.isfinite(o).all()):
        return math.inf
    return float(torch.linalg.norm(o - ref) / torch.linalg.norm(ref))


class Kernel:
    """One compiled schedule for one op kind (shape-independent but for the tensor maps)."""

    def __init__(self, op: Gemm, sched: W.WgmmaSchedule, cache: dict) -> None:
        src = W.render(op, sched)
        key = src
        if key not in cache:
            t0 = time.perf_counter()
            cubin, log = compile_source(src, sched.name)
            cache[key] = (cubin, log, time.perf_counter() - t0, sass_counts(cubin))
        self.cubin, self.log, self.compile_s, self.sass = cache[key]
        self.op, self.sched = op, sched
        self.launcher = T.Launcher(self.cubin, W.KERNEL_NAME, sched.smem_bytes)
        self.max_clusters = self.launcher.max_active_clusters(sched.threads, sched.cluster) \
            if sched.cluster > 1 else None
        self.regs = self.launcher.attribute("NUM_REGS")
        self.local = self.launcher.attribute("LOCAL_SIZE_BYTES")

    def prepare(self, op: Gemm, ins, out, sm_count: int):
        """Tensor maps and arguments for ``op`` on these tensors; pads A/B to 16-byte row strides when
        TMA cannot describe them as they are (the copy is then part of every call)."""
        import torch

        pad = W.tma_unsupported(op) is not None
        srcs = {}
        for which in ("a", "b"):
            t = ins[which]
            rows, inner = t.shape
            if (inner * 2) % 16:
                inner_p = (inner + 7) // 8 * 8
                buf = torch.empty((rows, inner_p), dtype=t.dtype, device=t.device)
                srcs[which] = (buf, inner_p, t)
            else:
                srcs[which] = (t, inner, None)
        ma, mb = T.operand_maps(op, self.sched, srcs["a"][0].data_ptr(), srcs["b"][0].data_ptr(),
                                srcs["a"][1], srcs["b"][1])
        bias = ins.get("bias")
        res = ins.get("residual")
        mc, store_tma = T.output_map(op, self.sched, out.data_ptr())
        kop = T.kernel_op(op, self.sched)  # M and N as the kernel takes them (exchanged under swap)
        args = T.gemm_args(ma, mb, mc, out.data_ptr(), bias.data_ptr() if bias is not None else 0,
                           res.data_ptr() if res is not None else 0, op.alpha, kop.m, kop.n, op.k, store_tma)
        grid, threads, _ = W.launch_geometry(op, self.sched, sm_count, self.max_clusters)
        if self.sched.split != 1:  # split-K: a workspace, zeroed semaphores, the plan (hopper/splitk.py)
            from tracea.emitters.cuda.hopper.gemm import split_plan

            plan = split_plan(op, self.sched, sm_count)
            if plan.spread and plan.splits > grid:  # a slice would wait on one never started (as tma.split_args)
                raise RuntimeError(f"split-K spread fix-up: {plan.splits} slices a tile, {grid} blocks")
            self._ws = torch.empty(max(16, plan.ws_bytes), dtype=torch.uint8, device="cuda")
            self._sem = torch.zeros(max(1, plan.sem_count), dtype=torch.int32, device="cuda")
            args += [ctypes.c_uint64(self._ws.data_ptr()), ctypes.c_uint64(self._sem.data_ptr()),
                     ctypes.c_int(plan.splits), ctypes.c_int(plan.dp_tiles)]
        copies = [(buf, t) for buf, _, t in srcs.values() if t is not None]
        stream = torch.cuda.current_stream().cuda_stream

        def call() -> None:
            for buf, t in copies:
                buf[:, : t.shape[1]].copy_(t)
            self.launcher.launch(grid, threads, stream, args)

        return call, pad


def run_probe(out_dir: Path) -> dict:
    import torch

    cubin, log = compile_source(W.render_tma_probe(), "tma_probe")
    launcher = T.Launcher(cubin, "tr_tma_probe", 0)
    tile = torch.arange(64 * 64, dtype=torch.int16, device="cuda").view(torch.bfloat16).reshape(64, 64).contiguous()
    out = torch.full((64 * 64,), -1, dtype=torch.int16, device="cuda")
    m = T.encode_2d(tile.data_ptr(), "bf16", 64, 64, 64, (64, 64))
    import ctypes

    launcher.launch(1, 128, torch.cuda.current_stream().cuda_stream, [m, ctypes.c_uint64(out.data_ptr())])
    torch.cuda.synchronize()
    got = out.cpu().tolist()
    layout = TileLayout(64, 64, 2, "row", swizzle=TmaSwizzle("128B"))
    bad = 0
    for r in range(64):
        for c in range(64):
            if got[layout.offset(r, c) // 2] != r * 64 + c:
                bad += 1
    plain = sum(got[r * 64 + c] != r * 64 + c for r in range(64) for c in range(64))
    rec = {"elements": 4096, "mismatches_vs_layout": bad, "mismatches_vs_unswizzled": plain}
    print(f"TMA 128B probe: {bad} of 4096 elements off TileLayout(TmaSwizzle('128B')); "
          f"{plain} off the unswizzled layout")
    return rec


def verify_cases(quick: bool) -> list[tuple[Gemm, W.WgmmaSchedule]]:
    hero = W.HERO
    cases = []
    shapes = [(256, 512, 128), (333, 520, 200), (1000, 1000, 1000), (1, 4096, 4096), (2048, 2048, 4096)]
    for m, n, k in shapes:
        op = Gemm(m, n, k, dtype="bf16")
        cases.append((op, W.hero_schedule(op)))
        cases.append((op, hero))
    cases.append((Gemm(4096, 4096, 4096, dtype="fp16"), hero))
    cases.append((Gemm(520, 392, 136, dtype="bf16", layout_b="col"), hero))
    cases.append((Gemm(520, 392, 136, dtype="bf16", layout_a="col"), hero))
    cases.append((Gemm(520, 392, 136, dtype="fp16", layout_a="col", layout_b="col"), hero))
    cases.append((Gemm(777, 1032, 264, dtype="bf16", epilogue=("bias", "gelu", "scale", "residual"), alpha=0.5), hero))
    cases.append((Gemm(300, 264, 72, dtype="fp16", epilogue=("residual", "relu", "bias")), W.WgmmaSchedule(bm=64, bn=64, stages=8, consumers=1)))
    cases.append((Gemm(4097, 4097, 4097, dtype="bf16"), hero))
    for s in (W.WgmmaSchedule(bm=128, bn=128, stages=6), W.WgmmaSchedule(bm=256, bn=128, stages=4),
              W.WgmmaSchedule(bm=128, bn=256, stages=4, raster="n"), W.WgmmaSchedule(bm=128, bn=192, stages=4),
              W.WgmmaSchedule(bm=192, bn=128, stages=5, consumers=3)):
        cases.append((Gemm(1111, 1200, 776, dtype="bf16"), s))
    for s in (W.WgmmaSchedule(bm=128, bn=128, stages=6, pingpong=True),
              W.WgmmaSchedule(bm=64, bn=256, stages=5, pingpong=True)):
        cases.append((Gemm(3000, 3000, 136, dtype="bf16"), s))
        cases.append((Gemm(2048, 4096, 1000, dtype="fp16", layout_b="col", epilogue=("bias", "relu")), s))
        cases.append((Gemm(4096, 4096, 4096, dtype="bf16"), s))
    for s in (W.WgmmaSchedule(cluster=2), W.WgmmaSchedule(bm=128, bn=128, stages=6, pingpong=True, cluster=2)):
        cases.append((Gemm(3000, 3000, 136, dtype="bf16"), s))
        cases.append((Gemm(1100, 4096, 1000, dtype="fp16", layout_b="col", epilogue=("bias", "relu")), s))
        cases.append((Gemm(4096, 4096, 4096, dtype="bf16"), s))
        cases.append((Gemm(130, 264, 4104, dtype="bf16", layout_a="col"), s))
    ts = W.WgmmaSchedule(store="tma")
    for op in (Gemm(4096, 4096, 4096, dtype="bf16"), Gemm(777, 1032, 264, dtype="bf16", alpha=0.5,
                                                          epilogue=("bias", "gelu", "scale", "residual")),
               Gemm(777, 1001, 264, dtype="fp16", epilogue=("residual", "bias")),
               Gemm(3000, 3000, 136, dtype="fp16", layout_a="col", layout_b="col")):
        cases.append((op, ts))
    for s in (W.WgmmaSchedule(bm=128, bn=128, stages=6, pingpong=True, store="tma"),
              W.WgmmaSchedule(bm=128, bn=128, stages=6, pingpong=True, cluster=2, store="tma"),
              W.WgmmaSchedule(cluster=2, store="tma"), W.WgmmaSchedule(bm=64, bn=64, stages=8, consumers=1, store="tma")):
        cases.append((Gemm(2000, 3000, 520, dtype="bf16", epilogue=("bias", "relu")), s))
        cases.append((Gemm(4096, 4096, 4096, dtype="bf16"), s))
    # dedupe (hero_schedule may equal hero)
    seen, out = set(), []
    for op, s in cases:
        if (op, s) not in seen:
            seen.add((op, s))
            out.append((op, s))
    return out[:8] if quick else out


def run_verify(out_dir: Path, quick: bool, sm_count: int, cache: dict) -> list[dict]:
    import torch

    recs = []
    gen = torch.Generator(device="cuda")
    gen.manual_seed(int(time.time()))
    for op, sched in verify_cases(quick):
        rec = {"op": op.signature, "schedule": sched.name}
        # Written before each case: a case that hangs leaves its schedule named as "running", and the
        # bench phase (a separate process) skips schedules that failed or hung here.
        (out_dir / "verify.json").write_text(json.dumps({"records": recs, "running": sched.name}, default=str))
        try:
            k = Kernel(op, sched, cache)
            rec.update(regs=k.regs, local_bytes=k.local, sass=k.sass, compile_s=round(k.compile_s, 2),
                       max_clusters=k.max_clusters)
            ins = make_inputs(op, gen)
            out = torch.full((op.m, op.n), float("nan"), dtype=torch_dtype(op.dtype.value), device="cuda")
            call, pad = k.prepare(op, ins, out, sm_count)
            call()
            torch.cuda.synchronize()
            err = rel_err(out, reference(op, ins))
            rec.update(rel_err=err, tol=tolerance(op), ok=err <= tolerance(op), padded=pad)
        except Exception as exc:  # noqa: BLE001 - a failing candidate is a recorded result
            rec.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:2000])
        print(f"verify {rec['schedule']:32s} {op.signature[:90]:90s} "
              f"{'OK ' if rec.get('ok') else 'BAD'} err={rec.get('rel_err', float('nan')):.2e} "
              f"regs={rec.get('regs')} local={rec.get('local_bytes')} hgmma={rec.get('sass', {}).get('HGMMA')} "
              f"{rec.get('error', '')[:300]}")
        recs.append(rec)
    return recs


BENCH_SHAPES = [
    ("bf16", 4096, 4096, 4096), ("bf16", 8192, 8192, 8192), ("fp16", 4096, 4096, 4096),
    ("bf16", 4096, 4096, 11008), ("bf16", 4096, 4096, 14336),
    ("bf16", 1, 4096, 4096), ("bf16", 4, 4096, 4096), ("bf16", 8, 4096, 4096), ("bf16", 16, 4096, 4096),
    ("bf16", 4000, 4000, 4000), ("bf16", 4097, 4097, 4097),
]


def bench_candidates(op: Gemm, wide: bool) -> list[W.WgmmaSchedule]:
    c = [W.hero_schedule(op)]
    if wide and op.m > 64:
        c += [W.HERO, W.WgmmaSchedule(store="tma"), W.WgmmaSchedule(cluster=2), W.WgmmaSchedule(cluster=2, store="tma"),
              W.WgmmaSchedule(bm=128, bn=128, stages=6, pingpong=True),
              W.WgmmaSchedule(bm=128, bn=128, stages=6, pingpong=True, store="tma"),
              W.WgmmaSchedule(bm=128, bn=128, stages=6, pingpong=True, cluster=2, store="tma")]
    if wide and op.m <= 64:
        c += [W.WgmmaSchedule(bm=64, bn=64, stages=12, consumers=1),
              W.WgmmaSchedule(bm=64, bn=64, stages=8, consumers=1, store="tma")]
    return list(dict.fromkeys(c))


def time_pair(fn_a, fn_b, flush, reps: int, warmup: int) -> tuple[list[float], list[float]]:
    import torch

    ta, tb = [], []
    for i in range(warmup + reps):
        for fn, acc in ((fn_a, ta), (fn_b, tb)) if i % 2 == 0 else ((fn_b, tb), (fn_a, ta)):
            flush()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            if i >= warmup:
                acc.append(s.elapsed_time(e))
    return ta, tb


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def run_bench(out_dir: Path, quick: bool, sm_count: int, cache: dict, reps: int, only: str | None) -> list[dict]:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    flush_buf = torch.empty(512 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(int(time.time()) + 1)
    recs = []
    shapes = BENCH_SHAPES[:3] if quick else BENCH_SHAPES
    if only:
        shapes = [s for s in shapes if f"{s[0]}:{s[1]}x{s[2]}x{s[3]}" in only.split(",")] or shapes
    bad: set[str] = set()
    if (out_dir / "verify.json").exists():
        v = json.loads((out_dir / "verify.json").read_text())
        bad = {r["schedule"] for r in v.get("records", []) if not r.get("ok")} | {v.get("running")} - {None}
        print("bench skips schedules that failed or hung in verify:", sorted(bad))
    for dtype, m, n, k in shapes:
        op = Gemm(m, n, k, dtype=dtype)
        ins = make_inputs(op, gen)
        ref = reference(op, ins)
        a, b = ins["a"], ins["b"]
        torch_out = torch.empty((m, n), dtype=torch_dtype(dtype), device="cuda")

        def cublas(a=a, b=b, o=torch_out):
            torch.matmul(a, b, out=o)

        cublas()
        torch.cuda.synchronize()
        err_torch = rel_err(torch_out, ref)
        best = None
        for sched in bench_candidates(op, not quick):
            if sched.name in bad:
                continue
            rec = {"op": op.signature, "shape": f"{dtype} {m}x{n}x{k}", "schedule": sched.name}
            try:
                bench_schedule(rec, op, sched, ins, ref, cache, sm_count, cublas, flush_buf.zero_, reps, err_torch)
            except Exception as exc:  # noqa: BLE001
                rec.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:1500])
            print(f"bench {rec['shape']:22s} {sched.name:34s} "
                  + (f"{rec['ms']:.4f} ms (p95 {rec['p95']:.4f}) cuBLAS {rec['cublas_ms']:.4f} ms -> {rec['ratio']:.3f}x "
                     f"err {rec['rel_err']:.1e}{' padded' if rec['padded'] else ''}" if "ms" in rec else rec.get("error", "")))
            recs.append(rec)
            if "ms" in rec and (best is None or rec["ratio"] > best["ratio"]):
                best = rec
        if best is not None:
            best["best"] = True
    return recs


def bench_schedule(rec: dict, op: Gemm, sched, ins: dict, ref, cache: dict, sm_count: int, cublas, flush,
                   reps: int, err_torch: float) -> None:
    """``rec`` of one schedule: verified on the timed inputs (output poisoned with NaN first), then timed
    interleaved with cuBLAS; a wrong result raises, its error recorded first."""
    import torch

    kern = Kernel(op, sched, cache)
    out = torch.full((op.m, op.n), float("nan"), dtype=torch_dtype(op.dtype.value), device="cuda")
    call, pad = kern.prepare(op, ins, out, sm_count)
    call()
    torch.cuda.synchronize()
    err = rel_err(out, ref)
    rec.update(rel_err=err, ok=err <= tolerance(op), padded=pad, err_torch=err_torch)
    if not rec["ok"]:
        raise RuntimeError(f"wrong result: rel err {err:.3e} > {tolerance(op):.1e}")
    ours, theirs = time_pair(call, cublas, flush, reps, 5)
    med, med_c = statistics.median(ours), statistics.median(theirs)
    rec.update(ms=med, p95=pct(ours, 0.95), cublas_ms=med_c, cublas_p95=pct(theirs, 0.95),
               ratio=med_c / med, tflops=op.flops / med / 1e9, cublas_tflops=op.flops / med_c / 1e9)


def run_profile(out_dir: Path, sm_count: int, cache: dict) -> list[dict]:
    """One verified launch of a few 4096^3 bf16 schedules, for ``ncu -k tr_wgmma_gemm`` to read."""
    import torch

    op = Gemm(4096, 4096, 4096, dtype="bf16")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(int(time.time()))
    ins = make_inputs(op, gen)
    ref = reference(op, ins)
    recs = []
    for sched in (W.HERO, W.WgmmaSchedule(store="tma"), W.WgmmaSchedule(cluster=2)):
        k = Kernel(op, sched, cache)
        out = torch.full((op.m, op.n), float("nan"), dtype=torch.bfloat16, device="cuda")
        call, _ = k.prepare(op, ins, out, sm_count)
        call()
        torch.cuda.synchronize()
        recs.append({"schedule": sched.name, "rel_err": rel_err(out, ref)})
        print("profiled", recs[-1])
    return recs


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", choices=("probe", "verify", "bench", "profile"), required=True)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/wgmma_out"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--only", default=None, help="bench shapes as dtype:MxNxK,...")
    args = ap.parse_args()
    import torch
    from cuda.bindings import driver as drv

    torch.cuda.init()
    torch.empty(1, device="cuda")
    drv.cuInit(0)
    props = torch.cuda.get_device_properties(0)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    head = {"device": props.name, "sm_count": props.multi_processor_count, "torch": torch.__version__,
            "cuda": torch.version.cuda, "phase": args.phase}
    print(json.dumps(head))
    cache: dict = {}
    if args.phase == "probe":
        recs = run_probe(out_dir)
    elif args.phase == "verify":
        recs = run_verify(out_dir, args.quick, props.multi_processor_count, cache)
    elif args.phase == "profile":
        recs = run_profile(out_dir, props.multi_processor_count, cache)
    else:
        recs = run_bench(out_dir, args.quick, props.multi_processor_count, cache, args.reps, args.only)
    for log in {v[1] for v in cache.values()}:
        for line in log.splitlines():
            if "registers" in line or "spill" in line or "C7508" in line or "setmaxnreg" in line:
                print("ptxas:", line.strip())
    (out_dir / f"{args.phase}.json").write_text(json.dumps({"head": head, "records": recs}, indent=1, default=str))
    if args.phase == "bench":
        print("\nshape                  schedule                           ours ms   cuBLAS ms  ratio  TFLOP/s")
        for r in recs:
            if r.get("best"):
                print(f"{r['shape']:22s} {r['schedule']:34s} {r['ms']:8.4f} {r['cublas_ms']:10.4f} "
                      f"{r['ratio']:6.3f} {r['tflops']:7.1f}{' (padded)' if r['padded'] else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
