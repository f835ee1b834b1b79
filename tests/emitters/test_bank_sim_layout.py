"""Layout and swizzle algebra: CUTLASS Swizzle<B,M,S> exactly as cute/swizzle.hpp defines it, the TMA
modes as their CUTLASS equivalents, the seeds' Xor-k, bijections on tiles, tile offsets, tile sweeps."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError
from tracea.emitters.bank_access import matrix_sweep, parse_access, tile_sweep, vector_sweep
from tracea.emitters.bank_sim import simulate
from tracea.emitters.layout import (
    NoSwizzle,
    Swizzle,
    TileLayout,
    TmaSwizzle,
    XorSwizzle,
    parse_swizzle,
)


def test_cutlass_masks_and_make_swizzle_examples():
    # cute/swizzle.hpp: make_swizzle<0b1000, 0b0100>() -> Swizzle<1,2,1>;
    #                   make_swizzle<0b11000000, 0b00000110>() -> Swizzle<2,1,5>.
    assert (Swizzle(1, 2, 1).yyy_mask, Swizzle(1, 2, 1).zzz_mask) == (0b1000, 0b0100)
    assert (Swizzle(2, 1, 5).yyy_mask, Swizzle(2, 1, 5).zzz_mask) == (0b11000000, 0b00000110)
    assert (Swizzle(3, 4, 3).yyy_mask, Swizzle(3, 4, 3).zzz_mask) == (0x380, 0x70)
    # A negative shift moves YYY left: yyy = bits [M, M+B), zzz = bits [M-S, M-S+B).
    assert (Swizzle(2, 4, -3).yyy_mask, Swizzle(2, 4, -3).zzz_mask) == (0x30, 0x180)


@pytest.mark.parametrize(("sw", "x", "y"), [
    (Swizzle(3, 4, 3), 0x080, 0x090),      # row 1 of a 128 B-swizzled tile: chunk 0 -> chunk 1
    (Swizzle(3, 4, 3), 0x3F0, 0x380),      # row 7, chunk 7 -> chunk 0
    (Swizzle(3, 4, 3), 0x400, 0x400),      # the pattern repeats every 1024 B
    (Swizzle(2, 3, 3), 0xC8, 0xD0),        # Swizzle<2,3,3>: bits 3-4 ^= bits 6-7
    (Swizzle(2, 4, -3), 0x30, 0x1B0),      # ZZZ (bits 7-8) ^= YYY (bits 4-5)
    (Swizzle(0, 4, 3), 0x123, 0x123),      # B = 0 is the identity
])
def test_cutlass_apply(sw, x, y):
    assert sw.apply(x) == y
    assert sw.apply(np.array([x]))[0] == y


@pytest.mark.parametrize(("b", "m", "s"), [(b, m, s) for b in range(4) for m in range(5) for s in (-5, -3, 3, 4, 5)
                                           if abs(s) >= b])
def test_cutlass_swizzles_are_involutive_bijections(b, m, s):
    sw = Swizzle(b, m, s)
    x = np.arange(1 << 14)
    y = sw.apply(x)
    assert np.array_equal(np.sort(y), x)
    assert np.array_equal(sw.apply(y), x)  # XOR of disjoint fields: applying twice undoes it


def test_tma_modes_are_cutlass_swizzles():
    assert TmaSwizzle("128B").cutlass == Swizzle(3, 4, 3) and TmaSwizzle("128B").period_bytes == 1024
    assert TmaSwizzle("64B").cutlass == Swizzle(2, 4, 3) and TmaSwizzle("64B").period_bytes == 512
    assert TmaSwizzle("32B").cutlass == Swizzle(1, 4, 3) and TmaSwizzle("32B").period_bytes == 256
    x = np.arange(4096)
    for mode in ("32B", "64B", "128B"):
        sw = TmaSwizzle(mode)
        span = sw.span_bytes
        # PTX "tensor swizzling modes": the 16 B chunk within the span XORs with (address / 128) % (span / 16).
        expected = (x & ~((span - 1) & ~15)) | ((((x >> 4) ^ (x >> 7)) & (span // 16 - 1)) << 4)
        assert np.array_equal(sw.apply(x), expected), mode


def test_element_unit_swizzle_converts_to_bytes():
    assert Swizzle.from_element_units(3, 3, 3, 2) == Swizzle(3, 4, 3)  # CUTLASS's half-precision 128 B swizzle


@pytest.mark.parametrize(("k", "pitch"), [(2, 64), (4, 64), (4, 128), (8, 128), (8, 256)])
def test_xor_k_equals_cutlass_for_power_of_two_pitch(k, pitch):
    xor = XorSwizzle(k)
    cut = xor.equivalent_cutlass(pitch)
    lines, along = np.meshgrid(np.arange(64), np.arange(pitch), indexing="ij")
    assert np.array_equal(xor.apply_line(lines, along, pitch), cut.apply(lines * pitch + along))


SWIZZLES = [NoSwizzle(), XorSwizzle(2), XorSwizzle(4), XorSwizzle(8), Swizzle(3, 4, 3), Swizzle(2, 4, 3),
            TmaSwizzle("128B"), TmaSwizzle("64B"), TmaSwizzle("32B")]


def _fitting_layouts() -> list[TileLayout]:
    """Every swizzle on every tile shape it fits (the misfits are test_layout_validation's business)."""
    out = []
    for sw, (rows, cols, eb, order) in itertools.product(SWIZZLES, [(128, 64, 2, "row"), (64, 128, 2, "col"),
                                                                  (32, 32, 4, "row"), (64, 16, 2, "row"),
                                                                  (16, 128, 1, "row")]):
        try:
            out.append(TileLayout(rows, cols, eb, order, swizzle=sw))
        except BadInputError:
            pass
    return out


@pytest.mark.parametrize("lay", _fitting_layouts(), ids=lambda lay: lay.describe())
def test_layouts_are_bijections_onto_the_tile(lay):
    rows, cols, eb = lay.rows, lay.cols, lay.elem_bytes
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    off = np.asarray(lay.offset(r, c)).ravel()
    assert len(np.unique(off)) == rows * cols
    assert off.min() >= 0 and off.max() < lay.size_bytes
    assert (off % eb == 0).all()


def test_offsets_row_col_major_and_padding():
    assert TileLayout(4, 8, 2).offset(1, 3) == (8 + 3) * 2
    assert TileLayout(4, 8, 2, "col").offset(1, 3) == (3 * 4 + 1) * 2
    assert TileLayout(4, 8, 4, pad_elems=1).offset(2, 5) == (2 * 9 + 5) * 4
    lay = TileLayout(128, 64, 2, swizzle=TmaSwizzle("128B"), base_bytes=2048)
    assert lay.offset(1, 0) == 2048 + 128 + 16 and lay.pitch_bytes == 128 and lay.size_bytes == 16384


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"rows": 0, "cols": 8, "elem_bytes": 2}, "rows"),
    ({"rows": 8, "cols": -1, "elem_bytes": 2}, "cols"),
    ({"rows": 8, "cols": 8, "elem_bytes": 3}, "elem_bytes"),
    ({"rows": 8, "cols": 8, "elem_bytes": 2, "order": "diag"}, "order"),
    ({"rows": 8, "cols": 8, "elem_bytes": 2, "pad_elems": -2}, "pad_elems"),
    ({"rows": 8, "cols": 64, "elem_bytes": 2, "base_bytes": 8}, "base_bytes"),
    ({"rows": 8, "cols": 64, "elem_bytes": 2, "swizzle": TmaSwizzle("128B"), "base_bytes": 512}, "base_bytes"),
    ({"rows": 8, "cols": 128, "elem_bytes": 2, "swizzle": TmaSwizzle("128B")}, "TMA 128B"),
    ({"rows": 8, "cols": 64, "elem_bytes": 2, "swizzle": TmaSwizzle("128B"), "pad_elems": 8}, "TMA"),
    ({"rows": 8, "cols": 16, "elem_bytes": 2, "swizzle": XorSwizzle(8)}, "Xor8"),
])
def test_layout_validation_names_the_field(kwargs, field):
    with pytest.raises(BadInputError, match=field):
        TileLayout(**kwargs)


@pytest.mark.parametrize(("make", "field"), [
    (lambda: Swizzle(3, 4, 2), "|S| >= B"), (lambda: Swizzle(-1, 4, 3), "bits"), (lambda: Swizzle(1, -4, 3), "base"),
    (lambda: XorSwizzle(3), "k must be"), (lambda: TmaSwizzle("256B"), "TMA swizzle mode"),
])
def test_swizzle_validation(make, field):
    with pytest.raises(BadInputError, match=field):
        make()


def test_out_of_tile_offset_is_bad_input():
    with pytest.raises(BadInputError, match="outside"):
        TileLayout(8, 8, 2).offset(8, 0)


@pytest.mark.parametrize(("text", "value"), [
    ("none", NoSwizzle()), ("xor4", XorSwizzle(4)), ("128B", TmaSwizzle("128B")), ("64b", TmaSwizzle("64B")),
    ("sw<3,4,3>", Swizzle(3, 4, 3)), ("Swizzle<2, 4, -3>", Swizzle(2, 4, -3)),
])
def test_parse_swizzle(text, value):
    assert parse_swizzle(text) == value


def test_parse_access():
    assert parse_access("ldmatrix.x4") == ("ldmatrix.x4", 16, "row")
    assert parse_access("ld.128.column") == ("ld", 16, "column")
    assert parse_access("cp.async.128.row") == ("cp.async", 16, "row")
    for bad in ("ld.96", "lds.32", "cp.async.16", "st.32.diag"):
        with pytest.raises(BadInputError):
            parse_access(bad)


def test_sweeps_cover_each_element_once():
    lay = TileLayout(64, 64, 2, swizzle=TmaSwizzle("128B"))
    for spec in ("ldmatrix.x4", "ldmatrix.x2", "ldmatrix.x1", "ld.128.row", "ld.128.column", "cp.async.64.row",
                 "st.32.column"):
        b = tile_sweep(lay, spec)
        used = b.addr[b.addr >= 0]
        nbytes = int(b.width[0])
        covered = (used[:, None] + np.arange(nbytes)[None, :]).ravel()
        assert np.array_equal(np.sort(covered), np.arange(lay.size_bytes)), spec


def test_ldmatrix_sweep_is_the_mma_a_fragment():
    b = matrix_sweep(TileLayout(16, 16, 2), "ldmatrix.x4")
    assert len(b) == 1
    lane_rows = [(a // 32, (a % 32) // 2) for a in b.addr[0]]
    assert lane_rows[:8] == [(r, 0) for r in range(8)] and lane_rows[8:16] == [(r, 0) for r in range(8, 16)]
    assert lane_rows[16:24] == [(r, 8) for r in range(8)] and lane_rows[24:] == [(r, 8) for r in range(8, 16)]


@pytest.mark.parametrize(("sw", "pad", "wavefronts_per_x4"), [
    (NoSwizzle(), 0, 32), (NoSwizzle(), 8, 4), (TmaSwizzle("128B"), 0, 4), (XorSwizzle(8), 0, 4),
    (Swizzle(2, 4, 3), 0, 8),
])
def test_ldmatrix_over_a_bf16_128x64_tile(sw, pad, wavefronts_per_x4):
    res = simulate(matrix_sweep(TileLayout(128, 64, 2, pad_elems=pad, swizzle=sw), "ldmatrix.x4"))
    assert set(res.wavefronts.tolist()) == {wavefronts_per_x4} and len(res) == 32


def test_vector_sweep_refuses_split_units():
    with pytest.raises(BadInputError, match="splits"):
        vector_sweep(TileLayout(32, 32, 4, swizzle=Swizzle(5, 2, 5)), "ld", 16)
    with pytest.raises(BadInputError, match="multiple"):
        vector_sweep(TileLayout(32, 30, 2), "ld", 16)


def test_column_sweep_with_a_tail_leaves_lanes_inactive():
    b = vector_sweep(TileLayout(40, 4, 4), "ld", 16, "column")
    assert len(b) == 2 and (b.addr[1, 8:] == -1).all() and (b.addr[1, :8] >= 0).all()


def test_every_swizzle_name_and_json_round_trip_fields():
    for sw in SWIZZLES:
        assert sw.name and sw.to_json()["kind"] in ("none", "xor", "cutlass", "tma")
    doc = TileLayout(128, 64, 2, swizzle=TmaSwizzle("128B")).to_json()
    assert doc["swizzle"]["cutlass"] == {"kind": "cutlass", "bits": 3, "base": 4, "shift": 3}
    assert list(itertools.islice(doc, 3)) == ["rows", "cols", "elem_bytes"]
