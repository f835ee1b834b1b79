"""Every kernel renders the same source as it did when these hashes were recorded: the hero schedule of
each core for each op (attention included), dtype and epilogue below (CPU families on the recorded CI machine, CUDA cores for
sm_90a and sm_80 on the recorded H100, with each CUDA kernel's launch: grid, block, shared memory,
arguments, metadata, TMA boxes; the HIP kernels for gfx90a and gfx942, with their launch) and a sample of
the schedules of the recorded tuning spaces.

A restructuring of the emitters must leave every hash as it is; a change that means to change a kernel
re-records them (``python tests/emitters/test_render_hashes.py --record``) and says why in its commit.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parents[1] / "fixtures"
RECORD = FIXTURES / "render_hashes.json"


def _ops() -> list[Any]:
    from tracea.kernels import Conv2d, Gemm, Softmax
    from tracea.kernels.ops.attention import Attention

    ops: list[Any] = []
    for dtype in ("fp32", "bf16", "fp16"):
        ops += [Gemm(m=256, n=192, k=128, dtype=dtype), Gemm(m=1000, n=999, k=1001, dtype=dtype),
                Gemm(m=512, n=512, k=256, dtype=dtype, epilogue="bias,gelu,scale,residual", alpha=0.5),
                Gemm(m=128, n=256, k=64, dtype=dtype, layout_a="col", layout_b="col", epilogue="relu"),
                Gemm(m=512, n=512, k=16384, dtype=dtype),  # split-K with evict-first operand loads on sm_90a
                Gemm(m=64, n=512, k=16384, dtype=dtype),  # the same, 64 x 64 tiles
                Conv2d(n=2, c=64, h=30, w=30, k=96, r=3, s=3, padding=1, stride=2, layout="nhwc", dtype=dtype),
                Conv2d(n=1, c=3, h=224, w=224, k=64, r=7, s=7, padding=3, stride=2, layout="nchw", dtype=dtype,
                       bias=True),
                Softmax(rows=4096, cols=1000, dtype=dtype), Softmax(rows=7, cols=65536, dtype=dtype),
                # attention: causal and odd, GQA with seq_q != seq_k and a window, head dim 256 with a block mask
                Attention(2, 4, 1000, 64, dtype=dtype, causal=True),
                Attention(1, 8, 300, 128, dtype=dtype, seq_k=513, kv_heads=2, window=(64, 32)),
                Attention(1, 2, 256, 256, dtype=dtype, block_size=(128, 128), block_mask=("10", "11")),
                Attention(2, 8, 3, 96, dtype=dtype, seq_k=3000, kv_heads=2, causal=True),  # decode
                # head dims no multiple of 64: padded rows (mma.sync), 32B and 64B swizzles (wgmma)
                Attention(2, 4, 333, 80, dtype=dtype, seq_k=517, kv_heads=2, causal=True),
                Attention(1, 2, 300, 160, dtype=dtype, window=(64, 0))]
    return ops


def _hosts() -> dict[str, Any]:
    from tracea.doctor.snapshot import read_snapshot

    return {name: read_snapshot(FIXTURES / "snapshots" / f"{name}.json")[0] for name in ("ci_vm", "h100_live")}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _launch(op: Any, schedule: Any, rendered: Any, scalars: dict[str, Any]) -> str:
    """Everything about a CUDA kernel but its text: entry, argument order, grid, block, shared memory,
    metadata, runtime scalars and, for the Hopper GEMM, the TMA boxes the host encodes."""
    facts: dict[str, Any] = {k: getattr(rendered, k) for k in ("name", "entry", "params", "grid", "block", "smem")}
    facts.update(metadata=rendered.metadata, scalars=scalars)
    if schedule.core == "wgmma" and op.kind == "gemm":
        from tracea.emitters.cuda.hopper.gemm import tma_boxes

        facts["tma_boxes"] = tma_boxes(op, schedule)
    return json.dumps(facts, sort_keys=True, default=repr)


def current() -> dict[str, str]:
    """case -> sha256 prefix of the rendered source, for every case this file covers."""
    from tracea.doctor.errors import TraceaError
    from tracea.emitters import cpu, cuda
    from tracea.emitters.cpu.render import render as cpu_render
    from tracea.emitters.cuda.arch import target_host, target_of
    from tracea.emitters.cuda.build import render as cuda_render
    from tracea.kernels import Op

    hosts = _hosts()
    out: dict[str, str] = {}
    for op in _ops():
        for v in cpu.ALL_VARIANTS:
            if v.op != op.kind or v.family == "cpu-neon":
                continue
            try:
                s = cpu.hero_schedule(op, v, hosts["ci_vm"])
                out[f"cpu {v.id} {op.signature} hero"] = _digest(cpu_render(op, v.family, s).source)
            except TraceaError as exc:
                out[f"cpu {v.id} {op.signature} hero"] = f"error: {type(exc).__name__}"
        for arch_name in ("sm_90a", "sm_80"):
            host = target_host(hosts["h100_live"], arch_name)
            arch = target_of(host, arch_name)
            for v in (*cuda.ALL_VARIANTS, *(x for x in cuda.VARIANTS if x.family == "cuda-wgmma")):
                if v.op != op.kind or op.dtype.value not in v.precisions:
                    continue
                key = f"cuda {arch_name} {v.id} {op.signature} hero"
                try:
                    s = cuda.hero_schedule(op, v, host, arch=arch)
                    rendered, scalars = cuda_render(op, s, arch)
                    out[key] = _digest(rendered.source)
                    out[key.replace(" hero", " hero launch")] = _digest(_launch(op, s, rendered, scalars))
                except TraceaError as exc:
                    out[key] = f"error: {type(exc).__name__}"
        out.update(_hip(op, hosts["ci_vm"]))
    for space in sorted((FIXTURES / "spaces").glob("*.json")):
        doc = json.loads(space.read_text())
        op = Op.from_json(doc["op"])
        trials = doc["trials"][:: max(1, len(doc["trials"]) // 12)]
        for t in trials:
            sched = t["schedule"]
            key = f"space {space.stem} {json.dumps(sched, sort_keys=True)}"
            if doc["backend"] == "cpu":
                s = cpu.CpuSchedule.from_json(sched)
                out[key] = _digest(cpu_render(op, doc["variant"].split(".")[0], s).source)
            else:
                arch = target_of(target_host(hosts["h100_live"], "sm_90a"), "sm_90a")
                out[key] = _digest(cuda_render(op, cuda.schedule_from_json(sched), arch)[0].source)
    return out


def _hip(op: Any, host: Any) -> dict[str, str]:
    """The HIP backend's hero for ``op`` on a gfx90a and a gfx942 target: the AMD source and its launch."""
    from dataclasses import asdict

    from tracea.doctor.errors import TraceaError
    from tracea.emitters import registry
    from tracea.emitters.hip.build import launch

    hip, out = registry.backend("hip"), {}
    for arch in ("gfx90a", "gfx942"):
        target = hip.target_host(host, arch)
        for v in hip.VARIANTS:
            if v.op != op.kind or op.dtype.value not in v.precisions:
                continue
            key = f"hip {arch} {v.id} {op.signature} hero"
            try:
                ln = launch(op, hip.hero_schedule(op, v, target), "amd")
                out[key] = _digest(ln.source)
                out[key.replace(" hero", " hero launch")] = _digest(json.dumps(
                    {k: val for k, val in asdict(ln).items() if k != "source"}, sort_keys=True, default=repr))
            except TraceaError as exc:
                out[key] = f"error: {type(exc).__name__}"
    return out


def test_every_kernel_renders_the_recorded_source() -> None:
    if not RECORD.exists():
        pytest.fail(f"{RECORD} is missing: record it with python {__file__} --record")
    recorded = json.loads(RECORD.read_text())
    now = current()
    assert len(recorded) > 150 and set(now) == set(recorded), (
        f"cases changed: +{sorted(set(now) - set(recorded))[:3]} -{sorted(set(recorded) - set(now))[:3]}")
    changed = sorted(k for k in now if now[k] != recorded[k])
    assert not changed, f"{len(changed)} kernels render differently, e.g. {changed[:3]}"


if __name__ == "__main__" and "--record" in sys.argv:
    RECORD.write_text(json.dumps(current(), indent=0, sort_keys=True) + "\n")
    print(f"recorded {len(json.loads(RECORD.read_text()))} cases in {RECORD}")
