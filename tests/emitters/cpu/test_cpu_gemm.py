"""The CPU GEMM, compiled with the real host compiler and run: every registered family this machine can
run, against the float64 reference on fresh random inputs.

Sizes: each of 1, 7, 33, 1000, 1023 and 4097 appears in each of m, n and k somewhere (non-square,
k = 1 included); every epilogue alone and chained in an unusual order; fp32, fp16 and bf16; all four
layout pairs; K longer than one K block (with 16-bit outputs: the fp32 workspace path)."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import threading

import numpy as np
import pytest

from tracea.doctor import probe
from tracea.doctor.errors import BadInputError
from tracea.emitters import cpu
from tracea.kernels import Gemm, relative_error, tolerance
from tracea.kernels.dtypes import to_float64

HOST = probe()
FAMILIES = ("cpu-avx512", "cpu-avx2-fma", "cpu-portable")

CASES = [
    # m, n, k, dtype, layout_a, layout_b, epilogue
    (1, 7, 33, "fp32", "row", "row", ()),
    (7, 33, 1000, "fp32", "col", "row", ()),
    (33, 1000, 1023, "fp32", "row", "col", ()),
    (1000, 1023, 4097, "fp32", "col", "col", ()),
    (1023, 4097, 1, "fp32", "row", "row", ("bias",)),
    (4097, 1, 7, "fp32", "row", "row", ("relu",)),
    (33, 4097, 33, "fp32", "row", "row", ("gelu",)),
    (1000, 7, 1023, "fp32", "row", "row", ("scale",)),
    (7, 1000, 4097, "fp32", "row", "row", ("residual",)),
    (1023, 33, 1000, "fp32", "row", "row", ("residual", "scale", "gelu", "bias", "relu")),
    (1, 1023, 1000, "fp16", "col", "row", ("bias", "gelu")),
    (33, 1000, 4097, "fp16", "row", "row", ()),
    (7, 4097, 33, "bf16", "row", "col", ("residual", "scale")),
    (1000, 1, 1023, "bf16", "col", "col", ()),
    (300, 200, 2500, "bf16", "row", "row", ("relu", "residual")),
]


pytestmark = pytest.mark.usefixtures("kernel_cache")  # a fresh binary cache: every kernel really compiled


def runnable(family: str, op_kind: str, dtype: str = "fp32"):
    v = cpu.resolve(f"{family}.{op_kind}")
    unmet = v.unmet(HOST, dtype)
    if unmet:
        pytest.skip(f"{v.id} cannot run here: {'; '.join(unmet)}")
    return v


def check(op, kernel, rng, out=None):
    inputs = op.random_inputs(rng)
    got = kernel(inputs, out)
    err = relative_error(to_float64(got, op.dtype), op.reference(inputs))
    assert err <= tolerance(op), f"{kernel.artifact.name} {op.signature}: relative error {err:.3g}"
    return inputs, got


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}-{c[3]}-{c[4][0]}{c[5][0]}-{'+'.join(c[6]) or 'none'}")
def test_gemm_matches_the_reference(family, case):
    m, n, k, dtype, la, lb, epi = case
    v = runnable(family, "gemm", dtype)
    op = Gemm(m, n, k, dtype=dtype, layout_a=la, layout_b=lb, epilogue=epi, alpha=-0.75)
    kernel = cpu.build(op, v, cpu.hero_schedule(op, v, HOST), HOST)
    check(op, kernel, np.random.default_rng())


@pytest.mark.parametrize("pack", [(False, True), (True, False), (False, False)], ids=["direct-a", "direct-b", "direct-ab"])
@pytest.mark.parametrize("layout_a", ["row", "col"])
def test_operands_read_in_place(pack, layout_a):
    v = runnable("cpu-avx512", "gemm") if "avx512f" in (HOST.cpu.isa or []) else runnable("cpu-portable", "gemm")
    rng = np.random.default_rng()
    for m, n, k in ((33, 1000, 7), (1000, 33, 1023), (1, 1, 1)):
        op = Gemm(m, n, k, layout_a=layout_a, epilogue=("bias",))
        s = dataclasses.replace(cpu.hero_schedule(op, v, HOST), pack_a=pack[0], pack_b=pack[1], kc=256)
        check(op, cpu.build(op, v, s, HOST), rng)


@pytest.mark.parametrize("family", FAMILIES)
def test_schedule_knobs_and_threads_give_the_same_bits(family):
    """Unroll, prefetch, small blocks, 1 or all threads: every variant computes each output element in
    the same order, so the results agree bit for bit (threads claim work, they do not split sums)."""
    v = runnable(family, "gemm")
    op = Gemm(257, 331, 1100, epilogue=("gelu",))
    rng = np.random.default_rng()
    base = cpu.hero_schedule(op, v, HOST)
    inputs, first = check(op, cpu.build(op, v, dataclasses.replace(base, threads=1), HOST), rng)
    for change in ({}, {"unroll": 1, "prefetch": 8}, {"unroll": 3, "mc": base.mr * 3, "nc": base.nr * 2}):
        kernel = cpu.build(op, v, dataclasses.replace(base, **change), HOST)
        for _ in range(2):
            got = kernel(inputs)
            if "mc" in change:  # other blocks, other K splits of the same sums: rounding may differ
                assert relative_error(got, op.reference(inputs)) <= tolerance(op)
            else:
                assert np.array_equal(got, first), change


def test_out_buffer_and_input_checks():
    v = cpu.resolve(cpu.VARIANTS[0].id if not cpu.VARIANTS[0].unmet(HOST, "fp32") else "cpu-portable.gemm")
    op = Gemm(70, 50, 30, epilogue=("residual",))
    kernel = cpu.build(op, v, cpu.hero_schedule(op, v, HOST), HOST)
    rng = np.random.default_rng()
    inputs = op.random_inputs(rng)
    out = np.full((70, 50), np.nan, np.float32)
    assert kernel(inputs, out) is out and relative_error(out, op.reference(inputs)) <= tolerance(op)
    # a strided input is made contiguous; the result is the same
    strided = dict(inputs, a=np.asfortranarray(inputs["a"]))
    assert np.array_equal(kernel(strided), out)
    for bad, word in (
        ({k: x for k, x in inputs.items() if k != "residual"}, "residual"),
        (dict(inputs, a=inputs["a"].astype(np.float64)), "dtype"),
        (dict(inputs, b=inputs["b"][:, :49]), "shape"),
        (dict(inputs, extra=inputs["a"]), "extra"),
    ):
        with pytest.raises(BadInputError, match=word):
            kernel(bad)
    for bad_out, word in ((np.empty((50, 70), np.float32), "out"), (np.empty((70, 50), np.float16), "out"),
                          (np.empty((70, 100), np.float32)[:, ::2], "contiguous")):
        with pytest.raises(BadInputError, match=word):
            kernel(inputs, bad_out)
    with pytest.raises(BadInputError, match="overlaps"):
        kernel(inputs, inputs["residual"])


def test_artifact_and_cache():
    v = runnable("cpu-portable", "gemm")
    op = Gemm(40, 10, 11, dtype="bf16", epilogue=("bias", "relu"))  # above gemv.MAX_M: the blocked core
    s = cpu.hero_schedule(op, v, HOST)
    first = cpu.build(op, v, s, HOST).artifact
    again = cpu.build(Gemm(90, 100, 110, dtype="bf16", epilogue=("bias", "relu")), v, s, HOST).artifact
    assert again.cache_hit and again.binary == first.binary and again.compile_seconds == 0.0  # shapes are run time
    assert first.language == "c" and first.variant == "cpu-portable.gemm" and first.entry == "tracea_gemm"
    assert "-O3" in first.flags and first.compiler_version and os.path.exists(first.compiler)
    assert first.schedule == s.to_json() and first.op == op.to_json()
    assert first.binary.startswith(os.environ["TRACEA_HOME"])
    meta = first.metadata
    assert meta["tile"] == {"M": s.mr, "N": s.nr, "K": s.kc, "stages": 1}
    assert meta["fragments"]["dtype_in"] == "bf16" and meta["fragments"]["dtype_acc"] == "fp32"
    assert meta["resources"]["regs_per_thread"] is None and meta["resources"]["smem_per_cta"] is None
    assert meta["resources"]["packed_b_bytes"] == 4 * s.kc * s.nc
    assert meta["launch"]["threads"] == s.threads
    assert meta["epilogue"] == ["bias", "relu", "round to bf16"]
    other = cpu.build(op, v, dataclasses.replace(s, unroll=2), HOST).artifact
    assert other.binary != first.binary  # the schedule is in the source, so in the key


def test_fork_and_threads_calling_at_once():
    """The thread pool survives fork (the bench harness verifies in a forked child) and one kernel
    called from several Python threads at once serialises, with right answers for each."""
    v = cpu.VARIANTS[0] if not cpu.VARIANTS[0].unmet(HOST, "fp32") else cpu.resolve("cpu-portable.gemm")
    op = Gemm(300, 200, 100)
    kernel = cpu.build(op, v, dataclasses.replace(cpu.hero_schedule(op, v, HOST), threads=HOST.cpu.logical_cores),
                       HOST)
    rng = np.random.default_rng()
    inputs, want = check(op, kernel, rng)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        ok = np.array_equal(kernel(inputs), want)
        os.write(w, b"1" if ok else b"0")
        os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    assert os.read(r, 1) == b"1" and os.WEXITSTATUS(status) == 0
    os.close(r)

    inputs2, _ = inputs, None
    results: list[bool] = []

    def run() -> None:
        for _ in range(5):
            results.append(np.array_equal(kernel(inputs2), want))

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 15


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) not found")
def test_avx512_inner_loop_is_zmm_fma_without_spills():
    v = runnable("cpu-avx512", "gemm")
    op = Gemm(64, 64, 64)
    s = cpu.hero_schedule(op, v, HOST)
    kernel = cpu.build(op, v, s, HOST)
    asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", kernel.artifact.binary],
                         capture_output=True, text=True, check=True).stdout
    # the function's own listing (not a call site naming it)
    body = re.split(r"<ukernel_packed_packed[.\w]*>:\n", asm)[1].split("\n\n")[0].splitlines()
    # the unrolled k loop: the backward branch (from its target to it) densest in FMAs
    addr = {int(ln.split(":")[0], 16): i for i, ln in enumerate(body) if re.match(r"\s*[0-9a-f]+:", ln)}
    loops = []
    for i, ln in enumerate(body):
        m = re.search(r"\tj\w+\s+([0-9a-f]+) <", ln)
        if m and int(m.group(1), 16) in addr and addr[int(m.group(1), 16)] < i:
            loops.append(body[addr[int(m.group(1), 16)]:i + 1])
    loop = max(loops, key=lambda lp: sum(bool(re.search(r"\tvfmadd\d{3}ps", ln)) for ln in lp) / len(lp))
    fmas = [ln for ln in loop if re.search(r"\tvfmadd\d{3}ps", ln)]  # gcc picks the 132/213/231 form
    assert len(fmas) == s.unroll * s.mr * s.nr // 16 and all("zmm" in ln for ln in fmas)
    # A is broadcast once per row and k step into a register and reused by the row's nr/16 FMAs
    # (folded {1to16} operands would load it nr/16 times and make the loop load-port bound)
    broadcasts = [ln for ln in loop if "vbroadcastss" in ln and "zmm" in ln]
    if s.nr > 16:
        assert len(broadcasts) == s.unroll * s.mr and not [ln for ln in fmas if "{1to16}" in ln]
    assert not [ln for ln in loop if "(%rsp)" in ln or "(%rbp)" in ln], "register spills in the micro-kernel"


RETIRE_SCRIPT = """
import os, sys, time, dataclasses
import numpy as np
from tracea.doctor import probe
from tracea.emitters import cpu
from tracea.emitters.cpu.pool import RETIRE_SECONDS
from tracea.kernels import Gemm
host = probe()
v = cpu.resolve("cpu-portable.gemm")
op = Gemm(200, 300, 400)
kernel = cpu.build(op, v, dataclasses.replace(cpu.hero_schedule(op, v, host), threads=2, unroll=3), host)
inputs = op.random_inputs(np.random.default_rng())
count = lambda: len(os.listdir("/proc/self/task"))
before = count()
want = kernel(inputs)
during = count()
time.sleep(RETIRE_SECONDS + 1.5)
after = count()
again = kernel(inputs)
print(before, during, after, count(), bool(np.array_equal(again, want)))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or (HOST.cpu.logical_cores or 1) < 2,
                    reason="needs Linux /proc and 2 cores")
def test_idle_workers_retire_and_come_back():
    """An idle kernel's workers exit after RETIRE_SECONDS (a process that loaded many kernels keeps no
    thread pool per kernel); the next call recreates them. In a fresh interpreter, to count threads."""
    import sys

    proc = subprocess.run([sys.executable, "-c", RETIRE_SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    before, during, after, again, same = proc.stdout.split()
    assert int(during) == int(before) + 1 and int(after) == int(before) and int(again) == int(during)
    assert same == "True"
