"""The Hopper attention kernel's host side: device buffers (q, k, v, the plan's CSR and order, the block
mask, out, lse), three 3-d TMA maps (head dim, sequence, batch x heads) built over the uploaded q, k, v,
and the launch through ``tma.Launcher`` (maps by value). The same calls as the CUDA attention kernel
object (``__call__`` -> O, ``forward`` -> (O, lse), ``time``, ``tiles_computed``), small so that it can be
folded onto it: the only differences are ``order`` and the maps after the shared ``PARAMS``. A persistent
schedule launches ``ctas`` blocks per SM of the device it runs on (``grid``), whatever the render assumed, or
``blocks`` (tests: many items a block on small problems).
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError, LaunchError

from ...timing import Timing
from ..attention_plan import BUFFERS, FLOAT_SCALARS, block_mask_bytes, tile_plan
from ..runtime import DeviceArray, OnCallerBuffers, _Device, event_timing
from .attention_schedule import AttnWgmmaSchedule


class WgmmaAttentionKernel(OnCallerBuffers):
    """A compiled ``tr_wgmma_attention`` for one Attention op on the current GPU; ``launch_on`` /
    ``launch_ptrs`` run it on a caller's q, k, v and out (runtime.OnCallerBuffers: the maps are made over
    those pointers, lse and the tile plan stay the kernel's own)."""

    def __init__(self, op: Any, artifact: Any, rendered: Any, scalars: dict[str, float | int],
                 blocks: int | None = None) -> None:
        from pathlib import Path

        from ..tma import Launcher

        self.op, self.artifact, self.rendered, self._scalars = op, artifact, rendered, scalars
        self.schedule = AttnWgmmaSchedule.from_json(artifact.schedule)
        self._dev = _Device.get()
        binary = artifact.binary
        cubin = binary if isinstance(binary, (bytes, bytearray)) else Path(binary).read_bytes()
        self._launcher = Launcher(bytes(cubin), rendered.entry, rendered.smem)
        self._grid, walk = rendered.grid[0], None
        if self.schedule.persistent:  # ``ctas`` blocks per SM of this device (the render assumed the target's count)
            from .attention import grid_blocks, walk_plan, work_items

            sms = int(getattr(self._dev.dev.properties, "multiprocessor_count", 0) or 0)
            self._grid = (min(work_items(op, self.schedule), blocks) if blocks
                          else grid_blocks(op, self.schedule, sms) if sms else rendered.grid[0])
            walk = walk_plan(op, self.schedule, self._grid)  # the static schedule of this grid's blocks
        # packed entries compute their tiles on the device: no host plan (the capacity's would go unread)
        self.plan = None if op.packed else tile_plan(op, self.schedule.bq, self.schedule.bk)
        self._dtype = op.dtype.storage
        self._shapes = {n: tuple(v) for n, v in op.shapes().items()}
        self._out_shape = tuple(op.output_shape())
        self._dbuf: dict[str, DeviceArray] = {}
        self._lock = threading.Lock()
        self._args: list[Any] | None = None
        plan = (self.plan.ptr, self.plan.idx, self.plan.order) if self.plan is not None else (None,) * 3
        for name, arr in (*zip(("tile_ptr", "tile_idx", "order"), plan, strict=True), ("walk", walk),
                          ("bmask", block_mask_bytes(op))):
            if arr is not None and arr.size:
                self._buffer(name, arr.nbytes).upload(np.ascontiguousarray(arr))

    @property
    def tiles_computed(self) -> int:
        """(q tile, k tile) pairs the kernel computes over batch x heads (packed: over the op's entries)."""
        if self.op.packed:
            return self.op.heads * sum(c * tile_plan(e, self.schedule.bq, self.schedule.bk).computed
                                       for e, c in self.op._entries() if e is not None)
        return self.plan.computed * self.op.batch * self.op.heads  # type: ignore[union-attr]

    def _buffer(self, name: str, nbytes: int) -> DeviceArray:
        buf = self._dbuf.get(name)
        if buf is None or buf.nbytes != nbytes:
            buf = self._dbuf[name] = DeviceArray(self._dev, nbytes)
        return buf

    def upload(self, inputs: dict[str, np.ndarray]) -> None:
        from ..tma import encode_tiled
        from .attention_device import tma_box

        op, d = self.op, self.op.head_dim
        chunk, swizzle = tma_box(d)  # the kernel's, at the padded dim; the map's extent is d (TMA zeros past it)
        shapes = op.shapes()
        if not self._borrowing:  # launch_ptrs: q, k, v and out are the caller's, only the maps are made
            self._tapes = None
            for name in ("q", "k", "v") + (("cu_seqlens",) if op.packed else ()):
                x = inputs.get(name) if hasattr(inputs, "get") else None
                want = op.input_dtype(name)
                if not isinstance(x, np.ndarray) or x.shape != shapes[name] or x.dtype != want:
                    raise BadInputError(f"inputs[{name!r}]: expected a {shapes[name]} {want} array")
                self._buffer(name, x.nbytes).upload(np.ascontiguousarray(x))
            self._buffer("out", int(np.prod(op.output_shape())) * 2)
        self._buffer("lse", int(np.prod(op.lse_shape())) * 4)
        s = self.schedule
        maps = []
        for name, seq, heads, rows in (("q", op.seq_q, op.heads, s.bq), ("k", op.seq_k, op.kv_heads, s.bk),
                                       ("v", op.seq_k, op.kv_heads, s.bk)):
            if op.packed:  # (head dim, tokens, heads): a token's heads one after another
                dims, strides = (d, shapes["q"][0], heads), (heads * d * 2, d * 2)
            else:
                dims, strides = (d, seq, op.batch * heads), (d * 2, seq * d * 2)
            maps.append(encode_tiled(int(self._dbuf[name].ptr), op.dtype.value, dims, strides,
                                     (chunk, rows, 1), swizzle))
        args: list[Any] = []
        for p in self.rendered.params:
            if p in BUFFERS or p in ("order", "walk", "cu_seqlens"):
                buf = self._dbuf.get(p)
                args.append(ctypes.c_uint64(int(buf.ptr) if buf is not None else 0))
            elif p in FLOAT_SCALARS:
                args.append(ctypes.c_float(self._scalars[p]))
            elif p.startswith("tm"):
                args.append(maps["QKV".index(p[2])])
            else:
                args.append(ctypes.c_int(int(self._scalars[p])))
        self._args = args

    def launch(self) -> None:
        if self._args is None:
            raise LaunchError("cuda-wgmma attention: launch before upload (no tensor maps yet)")
        self._launcher.launch(self._grid, self.rendered.block[0], self._dev.stream.handle, self._args)

    def forward(self, inputs: dict[str, np.ndarray], out: np.ndarray | None = None,
                lse: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(O, lse) on host arrays; a given ``out``/``lse`` (a NaN poison) is uploaded first, so unwritten
        elements show."""
        op = self.op
        given = out is not None, lse is not None
        out = np.empty(op.output_shape(), self._dtype) if out is None else out
        lse = np.empty(op.lse_shape(), np.float32) if lse is None else lse
        if out.shape != tuple(op.output_shape()) or out.dtype != self._dtype or not out.flags.c_contiguous:
            raise BadInputError(f"out: expected a C-contiguous {tuple(op.output_shape())} {self._dtype} array")
        if lse.shape != tuple(op.lse_shape()) or lse.dtype != np.float32 or not lse.flags.c_contiguous:
            raise BadInputError(f"lse: expected a C-contiguous {tuple(op.lse_shape())} float32 array")
        with self._lock:
            self.upload(inputs)
            if given[0]:
                self._dbuf["out"].upload(out)
            if given[1]:
                self._dbuf["lse"].upload(lse)
            self.launch()
            self._dev.stream.sync()
            self._dbuf["out"].download(out)
            self._dbuf["lse"].download(lse)
        return out, lse

    def __call__(self, inputs: dict[str, np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
        return self.forward(inputs, out)[0]

    def time(self, inputs: dict[str, np.ndarray], warmup: int = 3, repeats: int = 20,
             flush_l2: bool = True, hold_cycles: int | None = None) -> Timing:
        """As ``CudaKernel.time``: L2 flushed and the stream held before each launch, each between events."""
        with self._lock:
            self.upload(inputs)
            return event_timing(self._dev, self.launch, warmup, repeats, flush_l2, hold_cycles)

    @property
    def grid(self) -> int:
        """Blocks a launch runs: one a work item, or (persistent) min(items, ``ctas`` x this device's SMs)."""
        return self._grid

    def __repr__(self) -> str:
        return f"WgmmaAttentionKernel({self.rendered.name})"


def build(op: Any, sched: AttnWgmmaSchedule | None = None, arch: str = "sm_90a",
          blocks: int | None = None) -> WgmmaAttentionKernel:
    """Render, compile (NVRTC, cached) and load the kernel for ``op`` (the hero schedule by default):
    for the GPU tests and the probe; the CLI goes through the core registry instead. ``blocks``: the
    persistent grid (default: ``ctas`` blocks per SM)."""
    from ... import nvrtc as nv
    from ...artifact import Artifact
    from .attention import render
    from .attention_schedule import hero_schedule

    sched = sched or hero_schedule(op)
    r, scalars = render(op, sched)
    cubin, res, log, hit, seconds = nv.compile_cached(r.source, r.name, r.entry, arch)
    meta = dict(r.metadata)
    meta["resources"] = res.to_json()
    artifact = Artifact(name=r.name, op=op.to_json(), variant="cuda-wgmma.attention", schedule=sched.to_json(),
                        source=r.source, language="cuda", entry=r.entry, compiler="NVRTC (cuda.core.Program)",
                        compiler_version=nv.find_nvrtc().version, flags=(), binary=str(cubin), cache_hit=hit,
                        compile_seconds=seconds, metadata=meta)
    return WgmmaAttentionKernel(op, artifact, r, scalars, blocks)
