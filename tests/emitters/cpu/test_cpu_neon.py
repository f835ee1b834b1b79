"""NEON kernels, cross-compiled for aarch64 and run under user-mode emulation (qemu-aarch64), verified
against the float64 references. Skipped where the cross toolchain is absent (CI): that is why the NEON
variants are rendered but not registered for the planner. Here it shows the NEON source is not only
syntactically valid but computes the right answers."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tracea.doctor import probe
from tracea.emitters import cpu
from tracea.emitters.cpu.render import render
from tracea.kernels import Conv2d, Gemm, Softmax, relative_error, tolerance
from tracea.kernels.dtypes import to_float64

CROSS = shutil.which("aarch64-linux-gnu-gcc")
QEMU = shutil.which("qemu-aarch64")
pytestmark = pytest.mark.skipif(not (CROSS and QEMU), reason="needs aarch64-linux-gnu-gcc and qemu-aarch64")
HOST = probe()

DRIVER = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int ENTRY(void* const* bufs, const int64_t* dims, const double* fparams);
/* argv: nbufs {in:PATH | out:BYTES:PATH | null}... ndims DIM... nf F... */
int main(int argc, char** argv) {
    int i = 1, nb = atoi(argv[i++]), outb = -1;
    void* bufs[16] = {0};
    size_t outbytes = 0;
    const char* outpath = NULL;
    for (int b = 0; b < nb; ++b) {
        const char* a = argv[i++];
        if (!strncmp(a, "in:", 3)) {
            FILE* f = fopen(a + 3, "rb");
            fseek(f, 0, SEEK_END);
            long n = ftell(f);
            fseek(f, 0, SEEK_SET);
            bufs[b] = malloc(n + 64);
            if (fread(bufs[b], 1, n, f) != (size_t)n) return 3;
            fclose(f);
        } else if (!strncmp(a, "out:", 4)) {
            char* end;
            outbytes = strtoull(a + 4, &end, 10);
            outpath = end + 1;
            bufs[b] = malloc(outbytes + 64);
            memset(bufs[b], 0xFF, outbytes);  /* NaN: every element must be written */
            outb = b;
        }
    }
    int nd = atoi(argv[i++]);
    int64_t dims[32];
    for (int d = 0; d < nd; ++d) dims[d] = atoll(argv[i++]);
    int nf = atoi(argv[i++]);
    double fp[8] = {0};
    for (int d = 0; d < nf; ++d) fp[d] = atof(argv[i++]);
    int rc = ENTRY(bufs, dims, fp);
    if (rc) return 10 + rc;
    FILE* f = fopen(outpath, "wb");
    fwrite(bufs[outb], 1, outbytes, f);
    fclose(f);
    return argc > 0 ? 0 : 1;
}
"""


def run_neon(op, tmp: Path, rng) -> float:
    v = cpu.resolve(f"cpu-neon.{op.kind}")
    s = cpu.hero_schedule(op, v, HOST)
    r = render(op, "cpu-neon", s)
    (tmp / "kernel.c").write_text(r.source)
    (tmp / "driver.c").write_text(DRIVER)
    exe = tmp / "prog"
    build = subprocess.run([CROSS, "-O2", "-std=gnu11", "-pthread", *r.flags, f"-DENTRY={r.entry}", "-static",
                            str(tmp / "kernel.c"), str(tmp / "driver.c"), "-o", str(exe), "-lm"],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[:2000]
    inputs = op.random_inputs(rng)
    out = np.empty(op.output_shape(), op.dtype.storage)
    specs = []
    for name in r.buffers:
        if name == "out":
            specs.append(f"out:{out.nbytes}:{tmp / 'out.bin'}")
        elif name in inputs:
            inputs[name].tofile(tmp / f"{name}.bin")
            specs.append(f"in:{tmp / f'{name}.bin'}")
        else:
            specs.append("null")
    args = [str(len(specs)), *specs, str(len(r.dims)), *map(str, r.dims), str(len(r.fparams)), *map(repr, r.fparams)]
    proc = subprocess.run([QEMU, str(exe), *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = np.fromfile(tmp / "out.bin", dtype=op.dtype.storage).reshape(op.output_shape())
    return relative_error(to_float64(out, op.dtype), op.reference(inputs))


OPS = [
    Gemm(37, 29, 1100, epilogue=("residual", "scale", "gelu", "bias", "relu"), alpha=0.5),
    Gemm(7, 33, 1, layout_a="col", layout_b="col"),
    Gemm(33, 70, 130, dtype="fp16", layout_a="col", epilogue=("bias",)),
    Gemm(45, 13, 1030, dtype="bf16", layout_b="col", epilogue=("gelu",)),
    Conv2d(2, 6, 9, 11, 8, 3, 3, stride=2, padding=(1, 2), dilation=(2, 1), groups=2, bias=True),
    Conv2d(1, 4, 12, 10, 12, 3, 3, padding=1, layout="nhwc", dtype="bf16", bias=True),
    Softmax(9, 1001),
    Softmax(5, 37, dtype="fp16"),
    Softmax(3, 130, dtype="bf16"),
]


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.signature[:60])
def test_neon_under_emulation(op, tmp_path):
    err = run_neon(op, tmp_path, np.random.default_rng())
    assert err <= tolerance(op), f"{op.signature}: relative error {err:.3g}"
