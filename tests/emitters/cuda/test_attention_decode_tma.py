"""The decode kernel's TMA loads, without a GPU: where TMA's 128B swizzle puts each 16-byte chunk of a tile (the
boxes ``tr_tma_tile`` issues, contiguous and paged) against where the kernel's ``ldmatrix`` reads it
(``TR_KV``), for every tile width, head dim and page size the refusal rule lets through; and the rule itself.

TMA's 128B swizzle (CUDA's ``CU_TENSOR_MAP_SWIZZLE_128B``): within each 1024-byte span, the 16-byte chunk index
(address bits 4-6) is XORed with the 128-byte row index (bits 7-9); a box must start 1024-byte aligned for the
pattern to be the same whether counted from the box or from shared memory's start.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

T = pytest.importorskip("tracea.emitters.cuda.attention_decode_tma")


def tma_128b(addr: int) -> int:
    """The byte address TMA writes a chunk to, given its unswizzled address."""
    return addr ^ (((addr >> 7) & 7) << 4)


def kernel_reads(base: int, r: int, ch: int, bk: int) -> int:
    """``TR_KV(base, r, ch)`` with TMA loads, as DEVICE defines it (checked against the source below)."""
    return base + (ch >> 3) * (bk * 128) + r * 128 + (((ch & 7) ^ (r & 7)) << 4)


def tma_writes(base: int, r: int, ch: int, bk: int, page: int) -> tuple[int, int]:
    """(the box's shared-memory start, where TMA puts row r's chunk ch) for the boxes of ``tr_tma_tile``."""
    rows = min(page, bk) if page else bk  # TR_BOX_ROWS
    box = base + (ch >> 3) * (bk * 128) + (r // rows) * (rows * 128)
    return box, tma_128b(box + (r % rows) * 128 + (ch & 7) * 16)


def test_the_model_is_the_kernels_macro():
    """The Python forms above are the device code's (a changed macro fails here first)."""
    assert "((base) + ((ch) >> 3) * (BK * 128) + (r) * 128 + ((((ch) & 7) ^ ((r) & 7)) << 4))" in T.DEVICE
    assert "#define TR_BOX_ROWS (PAGE && PAGE < BK ? PAGE : BK)" in T.DEVICE
    assert "const uint32_t at = c * (BK * 128) + j * (TR_BOX_ROWS * 128);" in T.DEVICE
    assert "tr_tma_load_3d((is_v ? vd : kd) + at, is_v ? mv : mk, c * 64, kt * BK, slab, bar);" in T.DEVICE
    assert "const int j = x % TR_NB, c = x / TR_NB % (HD / 64);" in T.DEVICE
    assert "const bool is_v = x >= TR_BOXES / 2;" in T.DEVICE
    assert "for (int x = lane; x < TR_BOXES; x += 32)" in T.DEVICE
    assert "lane % TR_NB * TR_BOX_ROWS" in T.DEVICE  # a lane's page: its boxes' row box


def issued(bk: int, head_dim: int, page: int) -> dict[tuple[int, int, bool], list[int]]:
    """(row box j, column block c, V?) -> the lanes of warp 0 that issue it, as ``tr_tma_tile`` deals them."""
    nb = bk // (min(page, bk) if page else bk)
    boxes = 2 * nb * (head_dim // 64)
    out: dict[tuple[int, int, bool], list[int]] = {}
    for lane in range(32):
        for x in range(lane, boxes, 32):
            out.setdefault((x % nb, x // nb % (head_dim // 64), x >= boxes // 2), []).append(lane)
    return out


@pytest.mark.parametrize("bk", [32, 64, 128, 256])
@pytest.mark.parametrize("head_dim", [64, 128, 192, 256])
@pytest.mark.parametrize("page", [0, 8, 16, 32, 64, 128, 256])
def test_warp_zero_issues_every_box_once_at_its_lanes_page(bk, head_dim, page):
    """Every (row box, column block, K or V) of a tile is issued by exactly one lane, and that lane's looked-up
    page (``tr_tma_page``: of row box lane % NB) is the box's."""
    op = SimpleNamespace(head_dim=head_dim, page_size=page or None)
    if T.refusal(op, bk) is not None:
        return
    nb = bk // (min(page, bk) if page else bk)
    got = issued(bk, head_dim, page)
    want = {(j, c, v) for j in range(nb) for c in range(head_dim // 64) for v in (False, True)}
    assert set(got) == want and all(len(lanes) == 1 for lanes in got.values())
    assert all(lanes[0] % nb == j for (j, _c, _v), lanes in got.items())


def test_tiles_of_more_row_boxes_than_a_warp_shares_are_refused():
    assert "more than a warp" in T.refusal(SimpleNamespace(head_dim=64, page_size=8), 512)
    assert T.refusal(SimpleNamespace(head_dim=64, page_size=8), 256) is None


@pytest.mark.parametrize("bk", [32, 64, 128, 256])
@pytest.mark.parametrize("head_dim", [64, 128, 192, 256])
@pytest.mark.parametrize("page", [0, 8, 16, 24, 32, 64, 128, 256, 512, 12, 48, 96])
def test_every_chunk_tma_writes_is_where_ldmatrix_reads_it(bk, head_dim, page):
    op = SimpleNamespace(head_dim=head_dim, page_size=page or None)
    why = T.refusal(op, bk)
    if why is not None:
        assert page and (page % 8 or (bk % page and page % bk)), why
        return
    base = 3 * 1024  # the ring's start: 1024-byte aligned (the kernel rounds it up)
    seen = set()
    for r in range(bk):
        for ch in range(head_dim // 8):
            box, at = tma_writes(base, r, ch, bk, page)
            assert box % 1024 == 0, (r, ch, box)
            assert at == kernel_reads(base, r, ch, bk), (r, ch)
            seen.add(at)
    assert len(seen) == bk * head_dim // 8  # no two chunks on one place
    assert min(seen) == base and max(seen) == base + bk * head_dim * 2 - 16  # the slot, exactly


def test_an_ldmatrix_phase_hits_eight_bank_groups():
    """The 8 rows an ldmatrix phase reads (8 consecutive rows, one chunk) sit in 8 distinct 16-byte bank groups."""
    for bk in (64, 128):
        for ch in range(16):
            for r0 in range(0, bk, 8):
                groups = {(kernel_reads(0, r0 + i, ch, bk) >> 4) % 8 for i in range(8)}
                assert len(groups) == 8


def test_the_refusals_name_what_tma_cannot_tile():
    assert "multiple of 64" in T.refusal(SimpleNamespace(head_dim=96, page_size=None), 64)
    assert "pages of 24" in T.refusal(SimpleNamespace(head_dim=64, page_size=24), 64)
    assert "pages of 12" in T.refusal(SimpleNamespace(head_dim=64, page_size=12), 64)
    assert T.refusal(SimpleNamespace(head_dim=128, page_size=256), 64) is None
    assert T.refusal(SimpleNamespace(head_dim=64, page_size=None), 128) is None
