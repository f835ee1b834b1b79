"""When does NVRTC's program log lose ptxas's report (-v: registers, spills)? On the GPU machine's NVRTC 13.0
the spill checks of the CUDA tests failed now and then, the log holding only the front end's warnings. Each
source is compiled ``--rounds`` times in one process, as rendered and with one unused declaration taken out
(is it the warnings?), and with ``--cache-off`` under ``CUDA_CACHE_DISABLE=1`` set around each compile
(cuda-python issue 1124: NVRTC's cubin output goes through the driver's compute cache, and a cached compile
prints no ptxas report): whether the log names the entry function, and whether each cubin is byte-identical
to the first.

    . benchmarks/gpu/gpu_run_env.sh && $PY benchmarks/gpu/nvrtc_log_probe.py [--rounds N] [--cache-off]
"""

from __future__ import annotations

import argparse
import io
import os

from tracea.emitters import nvrtc
from tracea.emitters.cuda.hopper import gemm as hopper_gemm
from tracea.emitters.cuda.hopper import schedule as hopper_schedule
from tracea.kernels import Gemm

UNUSED = "            const bool inside = row < M && col < N;\n"


def compile_log(source: str, name: str, cache_off: bool = False) -> tuple[str, bytes]:
    from cuda.core import Program

    opts = nvrtc.options_for("sm_90a")
    logs = io.StringIO()
    old = os.environ.get("CUDA_CACHE_DISABLE")
    if cache_off:
        os.environ["CUDA_CACHE_DISABLE"] = "1"
    try:
        obj = Program(source, "c++", nvrtc._program_options(opts, f"{name}.cu")).compile("cubin", logs=logs)
    finally:
        if cache_off and old is None:
            os.environ.pop("CUDA_CACHE_DISABLE", None)
        elif cache_off:
            os.environ["CUDA_CACHE_DISABLE"] = old
    return logs.getvalue().replace("\x00", ""), bytes(obj.code)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cache-off", action="store_true", help="CUDA_CACHE_DISABLE=1 around each compile")
    ap.add_argument("--sequence", action="store_true",
                    help="is the switch read at each compile or once? a compile with the cache on first, then "
                         "with it off: new sources, then sources compiled before")
    a = ap.parse_args()
    if a.sequence:
        sequence()
        return
    print(f"NVRTC {nvrtc.find_nvrtc().version}; CUDA_CACHE_DISABLE=1 around each compile: {a.cache_off}")
    print("| op | source | round | warning in log | ptxas report in log | cubin as rendered |")
    print("|---|---|---|---|---|---|")
    for op in (Gemm(4096, 4096, 4096, "bf16"), Gemm(8, 4096, 4096, "bf16"), Gemm(512, 512, 512, "fp16")):
        sched = hopper_schedule.hero_schedule(op)
        rendered = hopper_gemm.render(op, sched)
        forms = {"rendered": rendered}
        if rendered.count("inside") == 1 and UNUSED in rendered:
            forms["without the unused declaration"] = rendered.replace(UNUSED, "")
        cubins = {}
        for label, src in forms.items():
            for i in range(a.rounds):
                log, cubin = compile_log(src, sched.name, a.cache_off)
                cubins.setdefault(label, cubin)
                same = "same" if cubin == cubins["rendered"] else "differs"
                print(f"| {op.m}x{op.n}x{op.k} {op.dtype.value} | {label} | {i} | {'#177' in log} | "
                      f"{'Compiling entry function' in log} | {same} |")


def sequence() -> None:
    """In one process: the first compile with the driver's cache on, then compiles with it off."""
    print(f"NVRTC {nvrtc.find_nvrtc().version}; one process")
    print("| step | source | CUDA_CACHE_DISABLE=1 | ptxas report in log |")
    print("|---|---|---|---|")
    sources = {}
    for i, op in enumerate((Gemm(4096, 4096, 4096, "bf16"), Gemm(8, 4096, 4096, "bf16"), Gemm(512, 512, 512, "fp16"))):
        sched = hopper_schedule.hero_schedule(op)
        # a comment that no earlier process compiled: a source new to the compute cache
        sources[f"{op.m}x{op.n}x{op.k} {op.dtype.value}"] = (f"/* {os.getpid()} {i} */\n" + hopper_gemm.render(op, sched),
                                                             sched.name)
    steps = [(0, False), (0, False), (1, True), (1, True), (0, True), (2, False), (2, True)]
    names = list(sources)
    for n, (which, off) in enumerate(steps):
        src, name = sources[names[which]]
        log, _ = compile_log(src, name, off)
        print(f"| {n} | {names[which]} | {off} | {'Compiling entry function' in log} |")
    for which in (0, 1, 2):  # the product's call after that: a source the cache holds, compiled anew if need be
        src, name = sources[names[which]]
        code, log = nvrtc.compile_with_report(src, f"{name}.cu", "tr_wgmma_gemm", nvrtc.options_for("sm_90a"))
        same = code == compile_log(src, name)[1]
        print(f"| product | {names[which]} | compile_with_report | {'Compiling entry function' in log} "
              f"(cubin {'same' if same else 'differs'}) |")


if __name__ == "__main__":
    main()
