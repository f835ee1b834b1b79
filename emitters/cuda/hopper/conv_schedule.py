"""The Hopper conv's schedule: ``WgmmaConvSchedule``, the GEMM's fields (``schedule.py``) as the implicit-GEMM conv
uses them, plus how its gathering producer publishes a stage, its ``path`` (a 1x1 stride-1 NHWC conv is a plain GEMM,
``gemm_view``, and runs the GEMM's kernel, "gemm"; TMA's im2col mode, "im2col"; or the gather, "gather";
``conv_paths.py`` says which paths a conv can take) and, on the im2col path, the channels a TMA box holds
(``chunk``) and output-channel tiles of any multiple of 8 (``bn``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from tracea.doctor.errors import BadInputError

from ...schedule import booleans
from .conv_paths import gemm_view_unsupported, im2col_unsupported
from .ptx import PTX_TYPE
from .schedule import BK, SMEM_OPTIN_SM90, WgmmaSchedule

PUBLISH = ("wait", "noinc")
CHUNKS = (64, 32, 16)  # channels of a TMA box: one 128-, 64- or 32-byte swizzled line of 16-bit elements
PATHS = ("gather", "gemm", "im2col")
CONV_PRODUCER_REGS = 96  # the gathering producer holds (n, h0, w0) of up to 16 lines and their addresses


@dataclass(frozen=True)
class WgmmaConvSchedule(WgmmaSchedule):
    """The Hopper GEMM's schedule fields, as the conv uses them: ``bm`` output pixels x ``bn`` output
    channels per tile, ``stages`` ring depth, ``consumers`` (and ``pingpong``), ``raster``/``group``
    (persistent tile order), ``store``. ``cluster`` is 1 (the gathering producer does not multicast).
    ``publish``: how a gathered stage is handed to the consumers: "wait" (each producer thread waits for
    its copies ``lag`` steps back, fences the proxy, arrives) or "noinc" (``cp.async.mbarrier.arrive.noinc``
    arrives when the thread's copies land, without blocking it; the consumers fence after the wait).
    ``path``: "gather" (the implicit GEMM above); "im2col": the activations loaded by TMA in im2col mode
    (one bulk copy per k step, no gathering threads; ``im2col_unsupported`` says where it cannot); or
    "gemm": the Hopper GEMM's kernel over ``gemm_view(op)`` with these fields as its ``WgmmaSchedule``
    (``as_gemm``; clusters allowed). ``publish`` matters to "gather" only.
    ``chunk`` (im2col path): channels a TMA box of x or of the filter holds, 64 (128B swizzle), 32 (64B) or 16
    (32B); a ring stage holds ``64 / chunk`` boxes of each, from consecutive (filter tap, channel chunk) steps of
    the k walk, so that C = 96 takes 3 boxes of 32 a tap and not 2 of 64 (a quarter of them zeros). Off the
    gemm path ``bn`` is any multiple of 8 up to 256 (the filter's boxes are K-major), so that 96 filters take one
    96-wide tile; widths that are not multiples of 64 store C directly (``store`` "direct"). ``trim`` (im2col path,
    boxes of 64): the consumers skip the k16 steps of a tap's last box that lie past C rounded up to 16 (TMA's zeros):
    C = 96 takes 6 k16 steps a tap, not 8, and C = 48 three, not 4; the boxes are as before. Neither a hero nor the
    tuner's space takes it: ptxas serialises the wgmma of a k16 loop with a skipped step (C7519/C7520, NVRTC 13.0),
    and on an H200 it lost up to 37 % on ping-pong tiles (docs/device-runs/h200-conv-channel-boxes/, call 2)."""

    publish: str = "wait"
    path: str = "gather"
    chunk: int = 64
    trim: bool = False
    producer_regs: ClassVar[int] = CONV_PRODUCER_REGS

    @staticmethod
    def of_gemm(s: WgmmaSchedule) -> WgmmaConvSchedule:
        """The GEMM schedule ``s`` as the conv's "gemm" path."""
        return WgmmaConvSchedule(**{f.name: getattr(s, f.name) for f in dataclasses.fields(WgmmaSchedule)},
                                 path="gemm")

    def as_gemm(self) -> WgmmaSchedule:
        """The GEMM's schedule with these fields (what the "gemm" path renders and launches)."""
        return WgmmaSchedule(**{f.name: getattr(self, f.name) for f in dataclasses.fields(WgmmaSchedule)})

    @property
    def chunks_per_step(self) -> int:
        """TMA boxes of each operand in one ring stage (one 64-deep k step)."""
        return BK // self.chunk

    def k_steps(self, op: Any) -> int:
        """Ring stages a tile's k walk takes: filter taps x channel chunks, ``chunks_per_step`` a stage."""
        return -(-op.r * op.s * -(-channels_padded(op) // self.chunk) // self.chunks_per_step)

    @property
    def lag(self) -> int:
        """k steps a producer thread keeps in flight before it publishes a stage (see the module doc)."""
        return min(2, self.stages - 2)

    @property
    def lines_per_thread(self) -> int:
        return self.bm // 16

    @property
    def name(self) -> str:
        return "conv_" + super().name + ("_ni" if self.publish == "noinc" else "") + \
            {"gemm": "_gemm", "im2col": "_i2c"}.get(self.path, "") + ("" if self.chunk == BK else f"_k{self.chunk}") + \
            ("_tr" if self.trim else "")

    def validate(self, op: Any = None, smem_optin: int = SMEM_OPTIN_SM90) -> None:
        if self.cluster_axis != "m":
            raise BadInputError(f"cluster_axis: the conv pairs blocks along M only ('m'), not {self.cluster_axis!r}")
        if self.path == "gemm":
            return self._validate_gemm_path(op, smem_optin)
        super().validate(None, smem_optin)
        if self.path not in PATHS:
            raise BadInputError(f"path: expected 'gather', 'gemm' or 'im2col', got {self.path!r}")
        if self.path == "im2col" and self.publish != "wait":
            raise BadInputError("publish: the im2col path loads x by TMA; it has no publish mode (leave 'wait')")
        if isinstance(self.chunk, bool) or not isinstance(self.chunk, int) or self.chunk not in CHUNKS:
            raise BadInputError(f"chunk: {self.chunk!r} channels a TMA box (64, 32 or 16)")
        if self.chunk != BK and self.path != "im2col":
            raise BadInputError(f"chunk: boxes of {self.chunk} channels are the im2col path's", "chunk 64")
        booleans(self, ("trim",))
        if self.trim and (self.path != "im2col" or self.chunk != BK):
            raise BadInputError("trim: skipping a tap's zero k16 steps is the im2col path's, with boxes of 64",
                                "trim false")
        if self.publish not in PUBLISH:
            raise BadInputError(f"publish: expected 'wait' or 'noinc', got {self.publish!r}")
        if self.cluster != 1:
            raise BadInputError("cluster: the conv's gathering producer runs one block per cluster (cluster 1)")
        if self.swap:
            raise BadInputError("swap: only the 1x1 conv's gemm path swaps its operands", "swap: false")
        if self.l2_hint != "normal":
            raise BadInputError("l2_hint: the conv's gathering and im2col producers load without L2 hints; "
                                "'first' is the GEMM's (and the 1x1 conv's gemm path)", "l2_hint 'normal'")
        if self.stages < 3:
            raise BadInputError(f"stages: {self.stages}; the conv's producer needs 3 or more to overlap its copies")
        if op is not None:
            if getattr(op, "kind", None) != "conv2d":
                raise BadInputError(f"cuda-wgmma.conv2d computes conv2d, not {getattr(op, 'kind', None)}")
            if op.dtype.value not in PTX_TYPE:
                raise BadInputError(f"dtype: cuda-wgmma takes bf16 or fp16 inputs, not {op.dtype.value}")
            if op.groups != 1:
                raise BadInputError("groups: grouped convolution is not implemented on CUDA")
            if self.trim and trimmed_steps(op) == 0:
                raise BadInputError(f"trim: C = {op.c} fills its boxes of 64 to within 16 channels; no k16 step to "
                                    "skip", "trim false")
            why = im2col_unsupported(op) if self.path == "im2col" else None
            if why is not None:
                raise BadInputError(f"path: TMA's im2col mode cannot walk {why}", "path 'gather'")

    def _validate_width(self) -> None:
        """Off the gemm path the filter is K-major: ``bn`` any multiple of 8 (wgmma n) up to 256; C's 64-column
        staging atoms need a multiple of 64 for the TMA store."""
        if self.path == "gemm":
            return super()._validate_width()
        if self.bn % 8 or not 8 <= self.bn <= 256:
            raise BadInputError(f"bn: {self.bn} output channels a tile is not a multiple of 8 up to 256 (wgmma n)")
        if self.bn % 64 and self.store == "tma":
            raise BadInputError(f"store: the TMA store writes C in 64-column atoms; bn {self.bn} is not a multiple "
                                "of 64", "store 'direct'")

    def _validate_gemm_path(self, op: Any, smem_optin: int) -> None:
        """The GEMM's checks on its fields, then: is ``op`` a plain GEMM (``gemm_view_unsupported``)."""
        self.as_gemm().validate(None, smem_optin)
        if self.publish != "wait":
            raise BadInputError("publish: the gemm path loads x by TMA; it has no publish mode (leave 'wait')")
        if self.chunk != BK or self.trim:
            raise BadInputError("chunk, trim: the im2col path's boxes", "chunk 64, trim false")
        if op is not None:
            if getattr(op, "kind", None) != "conv2d":
                raise BadInputError(f"cuda-wgmma.conv2d computes conv2d, not {getattr(op, 'kind', None)}")
            why = gemm_view_unsupported(op)
            if why is not None:
                raise BadInputError(f"path: the gemm path runs 1x1 stride-1 unpadded NHWC convs, not {why}",
                                    "path 'gather'")

    def to_json(self) -> dict[str, Any]:
        d = {**super().to_json(), "core": "wgmma", "kernel": "conv2d"}
        if self.path == "gather":  # the JSON of every gather schedule stays as it was before paths
            del d["path"]
        if self.chunk == BK:  # and of every schedule before chunks
            del d["chunk"]
        if not self.trim:
            del d["trim"]
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> WgmmaConvSchedule:
        d = dict(d)
        if d.pop("kernel", "conv2d") != "conv2d":
            raise BadInputError("schedule: not a cuda-wgmma conv2d schedule")
        publish, path, chunk = d.pop("publish", "wait"), d.pop("path", "gather"), d.pop("chunk", BK)
        trim = d.pop("trim", False)
        return WgmmaConvSchedule(**dataclasses.asdict(WgmmaSchedule.from_json(d)), publish=publish, path=path,
                                 chunk=chunk, trim=trim)


def channels_padded(op: Any) -> int:
    """The channel stride the kernel reads: C rounded up to 8 (16 bytes, TMA's and cp.async's unit)."""
    return (op.c + 7) // 8 * 8


def trimmed_steps(op: Any) -> int:
    """k16 steps of a tap's last box of 64 channels that lie past C rounded up to 16 (``trim`` skips them)."""
    return (-(-channels_padded(op) // BK) * BK - -(-op.c // 16) * 16) // 16
