"""The softmax core's three forms (a block per row, several rows per block, a row split over blocks):
which one the hero picks, their schedules' JSON, a NumPy model of each form's partition and merge, NVRTC
compiles for sm_80 and sm_90a without spills, and (marked ``gpu``) every form verified against the float64
reference on fresh random inputs, with an events timing beside torch's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError
from tracea.emitters.cuda.arch import parse_arch
from tracea.emitters.cuda.schedule import CudaSchedule
from tracea.emitters.cuda.softmax import hero_schedule, search_space
from tracea.emitters.cuda.softmax_parts import row_vectors
from tracea.kernels import Softmax, relative_error, tolerance
from tracea.kernels.dtypes import to_float64

VID = "cuda-simt.softmax"
DTYPES = ("fp32", "fp16", "bf16")
COLS = (1, 5, 31, 128, 1000, 1024, 1025, 4104, 32000, 50257, 131072)


class NoGpu:
    nvidia = None


def host_with(sms: int):
    """A host report whose one GPU has ``sms`` SMs (all the hero reads of it)."""
    gpu = type("Gpu", (), {"sm_count": sms})()
    return type("Host", (), {"nvidia": type("Nv", (), {"devices": [gpu]})()})()


def shapes() -> list[tuple[int, int]]:
    return [(r, c) for c in COLS for r in (1, 3, 64)] + [(65537, c) for c in COLS if c <= 1025]


# ------------------------------------------------------------------------------------------ choices
@pytest.mark.parametrize("dtype", DTYPES)
def test_hero_picks_the_form_by_shape(dtype):
    host = host_with(132)
    for cols in (1, 5, 128, 256, 512, 1000, 1024):
        for rows in (1, 3, 4096, 65537):
            s = hero_schedule(Softmax(rows, cols, dtype), host)
            assert s.lanes and not s.split, (rows, cols, s)
    for cols in (32000, 50257, 65536, 128256, 256000, 10**6):
        for rows in (1, 7, 64):
            s = hero_schedule(Softmax(rows, cols, dtype), host)
            assert s.split >= 2 and rows * s.split <= 2 * 132, (rows, cols, s)  # two 512-thread blocks a SM
            s = hero_schedule(Softmax(rows, cols, dtype), NoGpu())  # SMs assumed: one block a SM
            assert s.split >= 2 and rows * s.split <= 132, (rows, cols, s)
    # many long rows keep the block-per-row form (8192 x 8192 measured at 1.58x torch)
    assert hero_schedule(Softmax(8192, 8192, dtype), host) == CudaSchedule(
        "softmax", threads=512, vec=16 // Softmax(1, 1, dtype).dtype.itemsize, chunks=0)
    assert not hero_schedule(Softmax(132, 65536, dtype), host).split


@pytest.mark.parametrize("dtype", DTYPES)
def test_odd_rows_keep_16_byte_vectors(dtype):
    """Issue 16: a row length the vector does not divide (50257: a GPT-2 vocabulary) no longer drops the
    hero to one element an access; only rows shorter than 4 vectors stay scalar, and a short row narrows
    its vector where 16 bytes would hold more than 32 elements a lane (the rows form's registers)."""
    vec = 16 // Softmax(1, 1, dtype).dtype.itemsize
    arch = parse_arch("sm_90a")
    for cols in (4 * vec + 1, 1001, 4097, 32001, 50257, 128257, 10**6 + 3):
        for rows in (1, 3, 3000):
            hero = hero_schedule(Softmax(rows, cols, dtype), host_with(132))
            hero.validate(Softmax(rows, cols, dtype), arch)
            assert hero.vec == vec or (cols <= 1024 and hero.lanes), (rows, cols, hero)
    for cols in range(1, 1025):
        hero = hero_schedule(Softmax(5, cols, dtype), host_with(132))
        hero.validate(Softmax(5, cols, dtype), arch)
        v = hero.vec
        assert hero.lanes and hero.chunks * v <= 32, (cols, hero)
        if cols % vec == 0 or cols >= 4 * vec:  # the widest vector whose slots fit 32 elements a lane
            assert v == vec or (v > 1 and -(-row_vectors(cols, 2 * v) // 32) * 2 * v > 32), (cols, hero)
        else:
            assert v == 1, (cols, hero)


def test_every_hero_and_candidate_validates_over_odd_shapes():
    arch = parse_arch("sm_90a")
    for dtype in DTYPES:
        for rows in (1, 2, 7, 131, 133, 4097):
            for cols in (1, 2, 3, 7, 16, 33, 255, 1023, 1024, 1025, 4097, 8191, 65537, 10**6):
                op = Softmax(rows, cols, dtype)
                for sms in (1, 108, 132):
                    hero = hero_schedule(op, host_with(sms))
                    hero.validate(op, arch)
                for c in search_space(op, hero, arch):
                    c.validate(op, arch)
                    if c.split:
                        assert rows * c.split <= arch.sm_count * max(1, 1024 // c.threads)


def test_new_fields_stay_out_of_old_json_and_round_trip():
    old = CudaSchedule("softmax", threads=256, vec=4, chunks=1)
    assert "lanes" not in old.to_json() and "split" not in old.to_json() and old.name == "sm_t256_v4_c1"
    for s in (CudaSchedule("softmax", threads=128, vec=8, chunks=4, lanes=4),
              CudaSchedule("softmax", threads=512, vec=4, chunks=0, split=8)):
        assert CudaSchedule.from_json(s.to_json()) == s
    assert CudaSchedule("softmax", threads=128, vec=8, chunks=4, lanes=4).name == "sm_t128_v8_c4_l4"


@pytest.mark.parametrize("bad", [dict(lanes=3, chunks=1), dict(lanes=64, chunks=1), dict(lanes=4, chunks=1),
                                 dict(lanes=32, chunks=8, vec=8), dict(lanes=32, chunks=4, split=2),
                                 dict(split=1), dict(split=2, chunks=16, vec=4), dict(split=2, persist=1, chunks=1)])
def test_bad_forms_are_named(bad):
    s = CudaSchedule("softmax", **{"threads": 128, "vec": 4, **bad})
    with pytest.raises(BadInputError):
        s.validate(Softmax(5, 1000))


# ------------------------------------------------------------------------------- NumPy models
def fold(m: float, s: float, m2: float, s2: float) -> tuple[float, float]:
    mx = max(m, m2)
    return mx, (0.0 if m == -math.inf else s * math.exp(m - mx)) + (0.0 if m2 == -math.inf else s2 * math.exp(m2 - mx))


def _group_reduce(vals: dict[int, float], lanes: int, op) -> dict[int, float]:
    """xor shuffles over offsets below ``lanes``, as the kernel's: each stays inside its lane group."""
    o = lanes // 2
    while o:
        assert all((t ^ o) // lanes == t // lanes for t in vals)
        vals = {t: op(vals[t], vals[t ^ o]) for t in vals}
        o //= 2
    return vals


def where(row: int, cols: int, vec: int, n: int | None = None) -> tuple[int, int, int, int]:
    """The kernel's (off, nv, nf, h) for a row of ``n`` (default ``cols``) elements: ``softmax_parts.odd_row``
    when ``vec`` does not divide ``cols``; else the aligned forms' (0, cols / vec, cols / vec, 0)."""
    n = cols if n is None else n
    if cols % vec == 0:
        return 0, n // vec, n // vec, 0
    off = (row * cols) & (vec - 1)
    return off, (off + n + vec - 1) // vec, (off + n) // vec, 1 if off else 0


def read_slot(x: np.ndarray, row: int, i, vec: int, n: int | None = None) -> np.ndarray:
    """Slot ``i`` (or slots: an array) of ``row`` as the kernel reads it: one access inside the row,
    which must be a whole aligned vector of that row; else element by element, -inf outside the row."""
    cols = x.shape[1]
    off, _, nf, h = where(row, cols, vec, n)
    i = np.asarray(i)
    q = i[..., None] * vec + np.arange(vec) - off
    inside = (q >= 0) & (q < (cols if n is None else n))
    full = (i >= h) & (i < nf)
    assert inside[full].all() and ((row * cols + q[full][..., 0]) % vec == 0).all(), (row, i)
    return np.where(inside, x[min(row, x.shape[0] - 1), np.clip(q, 0, cols - 1)], -np.inf)


def write_slot(y: np.ndarray, writes: np.ndarray, row: int, i, vec: int, f: np.ndarray) -> None:
    """Slot ``i`` (or slots) of ``row`` written: the row's elements of it, no other."""
    cols = y.shape[1]
    q = np.asarray(i)[..., None] * vec + np.arange(vec) - where(row, cols, vec)[0]
    inside = (q >= 0) & (q < cols)
    y[row, q[inside]] = f[inside]
    np.add.at(writes[row], q[inside], 1)


@pytest.mark.parametrize("vec", (1, 2, 4, 8))
def test_slots_cover_each_element_once_and_full_slots_are_aligned(vec):
    """Head, body and tail: slots 0..nv-1 of every row hold each of its elements once, slots h..nf-1 are
    whole aligned vectors inside it, at most the two end slots are partial, and no row overlaps more
    slots than ``row_vectors`` (what the schedules size their registers by)."""
    for cols in (1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 100, 1001, 1002, 1004, 4097, 50257):
        most = 0
        for row in range(2 * vec + 3):  # the row's offset repeats with period vec
            off, nv, nf, h = where(row, cols, vec)
            q = np.arange(nv + 2)[:, None] * vec + np.arange(vec)[None, :] - off  # slots past nv read nothing
            inside = (q >= 0) & (q < cols)
            count = inside.sum(axis=1)
            assert (count[:nv] > 0).all() and (count[nv:] == 0).all(), (cols, row)
            assert np.array_equal(np.sort(q[inside]), np.arange(cols)), (cols, row, vec)  # each element once
            assert (count[h:nf] == vec).all() and ((row * cols + q[h:nf, 0]) % vec == 0).all()
            assert all(i in (0, nv - 1) for i in np.flatnonzero((count > 0) & (count < vec))), (cols, row)
            assert h == (off > 0) and (h == 0 or count[0] < vec)
            most = max(most, nv)
        assert most == row_vectors(cols, vec) and row_vectors(cols, vec) >= cols // vec, (cols, vec)


def model_block(x: np.ndarray, s: CudaSchedule) -> np.ndarray:
    """The block-per-row form (single pass, two passes or the persistent grid): thread t takes slots
    j * threads + t (j < chunks) or t, t + threads, .. below nv; pairs folded per slot, then in thread order."""
    rows, cols = x.shape
    y = np.full_like(x, np.nan)
    writes = np.zeros(x.shape, int)
    for row in range(rows):
        nv = where(row, cols, s.vec)[1]
        if s.chunks:
            assert s.chunks * s.threads >= nv
        mine = {t: [i for i in (range(t, s.chunks * s.threads, s.threads) if s.chunks else range(t, nv, s.threads))]
                for t in range(s.threads)}
        m, sm = -math.inf, 0.0
        for t in range(s.threads):  # each slot's pair, folded in the thread's order, then thread after thread
            for f in read_slot(x, row, np.array(mine[t], int), s.vec):
                if f.max() != -math.inf:
                    m, sm = fold(m, sm, f.max(), float(np.exp(f - f.max()).sum()))
        for t in range(s.threads):
            i = np.array([i for i in mine[t] if i < nv], int)
            write_slot(y, writes, row, i, s.vec, np.exp(read_slot(x, row, i, s.vec) - m) / sm)
    assert (writes == 1).all()
    return y


@pytest.mark.parametrize("rows,cols,dtype", [(3, 1001, "fp32"), (3, 1001, "fp16"), (2, 4097, "bf16"),
                                            (3, 50257, "fp16"), (4, 1024, "fp32"), (9, 2050, "bf16")])
def test_block_form_model_covers_every_element_once(rows, cols, dtype):
    arch = parse_arch("sm_90a")
    op = Softmax(rows, cols, dtype)
    hero = hero_schedule(Softmax(4096, cols, dtype), host_with(132))  # many rows: the block-per-row form
    cands = [c for c in [hero, *search_space(op, hero, arch)] if not c.lanes and not c.split]
    assert hero.vec == 16 // op.dtype.itemsize and (cols <= 1024 or not (hero.lanes or hero.split))
    x = np.random.default_rng(6).standard_normal((rows, cols)) * 4
    ref = Softmax(rows, cols).reference({"x": x.astype(np.float32)})
    for s in cands[:: max(1, len(cands) // 4)]:
        s.validate(op, arch)
        np.testing.assert_allclose(model_block(x.astype(np.float32).astype(np.float64), s), ref, rtol=1e-9)


def model_rows(x: np.ndarray, s: CudaSchedule) -> np.ndarray:
    """The rows form's index math: block b, thread t -> row b * (threads / lanes) + t / lanes, slots
    j * lanes + lane; the group's max, then its sum of exponentials, each over the lane group. A row past
    the end has no elements (n = 0)."""
    rows, cols = x.shape
    rpb = s.threads // s.lanes
    y = np.full_like(x, np.nan)
    writes = np.zeros(x.shape, int)
    for b in range(-(-rows // rpb)):
        held = {}
        for t in range(s.threads):
            row, lane = b * rpb + t // s.lanes, t % s.lanes
            live = row < rows
            for j in range(s.chunks):
                i = j * s.lanes + lane
                held[t, j] = read_slot(x, row if live else 0, i, s.vec, None if live else 0)
        mx = _group_reduce({t: max(held[t, j].max() for j in range(s.chunks)) for t in range(s.threads)},
                           s.lanes, max)
        with np.errstate(invalid="ignore"):  # rows past the end: -inf - -inf, never stored
            ex = {(t, j): np.exp(held[t, j] - mx[t]) for t in range(s.threads) for j in range(s.chunks)}
        sums = _group_reduce({t: sum(float(ex[t, j].sum()) for j in range(s.chunks)) for t in range(s.threads)},
                             s.lanes, lambda a, b: a + b)
        for t in range(s.threads):
            row, lane = b * rpb + t // s.lanes, t % s.lanes
            for j in range(s.chunks):
                i = j * s.lanes + lane
                if row < rows and i < where(row, cols, s.vec)[1]:
                    write_slot(y, writes, row, i, s.vec, ex[t, j] / sums[t])
    assert (writes == 1).all()
    return y


def model_split(x: np.ndarray, s: CudaSchedule) -> np.ndarray:
    """The split form: part p of a row is slots [p * per, min(nv, (p + 1) * per)), per = nv / split
    rounded up (nv: this row's slots); each part's pair is merged in part order by every block of the row
    (one result per row, whichever block came last)."""
    rows, cols = x.shape
    y = np.full_like(x, np.nan)
    writes = np.zeros(x.shape, int)
    for row in range(rows):
        nv = where(row, cols, s.vec)[1]
        per = -(-nv // s.split)
        pairs = []
        for p in range(s.split):
            lo, hi = p * per, min(nv, (p + 1) * per)
            if s.chunks:
                assert lo + s.chunks * s.threads >= hi  # the held part covers its range
            f = read_slot(x, row, np.arange(lo, max(lo, hi)), s.vec).ravel()
            pairs.append((f.max(), float(np.exp(f - f.max()).sum())) if f.size else (-math.inf, 0.0))
        m, sm = -math.inf, 0.0
        for pm, ps in pairs:
            m, sm = fold(m, sm, pm, ps)
        for p in range(s.split):
            i = np.arange(p * per, max(p * per, min(nv, (p + 1) * per)))
            write_slot(y, writes, row, i, s.vec, np.exp(read_slot(x, row, i, s.vec) - m) / sm)
    assert (writes == 1).all()
    return y


@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 5), (5, 31), (33, 128), (3, 1000), (2, 1024), (7, 1001)])
def test_rows_form_model_covers_every_element_once(rows, cols):
    for dtype in DTYPES:
        op = Softmax(rows, cols, dtype)
        hero = hero_schedule(op, host_with(132))
        cands = [hero] + [c for c in search_space(op, hero, parse_arch("sm_90a")) if c.lanes][::5]
        x = np.random.default_rng(3).standard_normal((rows, cols)) * 4
        ref = Softmax(rows, cols).reference({"x": x.astype(np.float32)})
        for s in cands:
            np.testing.assert_allclose(model_rows(x.astype(np.float32).astype(np.float64), s), ref, rtol=1e-5)


@pytest.mark.parametrize("rows,cols", [(1, 32000), (3, 50257), (7, 65536), (64, 4104), (1, 131072)])
def test_split_form_model_covers_every_element_once(rows, cols):
    for dtype in DTYPES:
        op = Softmax(rows, cols, dtype)
        hero = hero_schedule(op, host_with(132))
        cands = [c for c in [hero, *search_space(op, hero, parse_arch("sm_90a"))] if c.split][::7]
        x = np.random.default_rng(4).standard_normal((rows, cols)) * 4
        ref = Softmax(rows, cols).reference({"x": x.astype(np.float32)})
        for s in cands:
            np.testing.assert_allclose(model_split(x.astype(np.float32).astype(np.float64), s), ref, rtol=1e-9)


# ------------------------------------------------------------------------------- NVRTC compiles
COMPILE = [Softmax(131072, 128, "fp16"), Softmax(65536, 128), Softmax(4096, 1000, "bf16"), Softmax(7, 1001),
           Softmax(3, 5, "fp16"), Softmax(65537, 1, "bf16"), Softmax(2, 1024), Softmax(7, 65536, "bf16"),
           Softmax(1, 256000), Softmax(64, 128256, "fp16"), Softmax(1, 50257, "bf16"), Softmax(3, 10**6)]


@pytest.mark.parametrize("arch", ("sm_80", "sm_90a"))
@pytest.mark.parametrize("op", COMPILE, ids=lambda op: op.signature)
def test_new_forms_compile_without_spills(op, arch, kernel_home, monkeypatch):
    pytest.importorskip("cuda.core")
    from tracea.emitters import cuda
    from tracea.emitters import nvrtc as nv
    from tracea.emitters.cuda.build import compile_kernel

    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))
    try:
        nv.find_nvrtc()
    except Exception:  # noqa: BLE001 - no NVRTC here
        pytest.skip("NVRTC is not installed")
    hero = cuda.hero_schedule(op, VID, NoGpu())
    space = [c for c in cuda.search_space(op, VID, NoGpu(), arch) if c.lanes or c.split]
    # a sample of the new forms: every 6th for sm_90a, every 18th for sm_80 (the same register file)
    for s in [hero, *space[::6 if arch == "sm_90a" else 18]]:
        _, r, _, art = compile_kernel(op, VID, s, NoGpu(), arch)
        res = art.metadata["resources"]
        assert res["spills"] == 0 and res["stack_frame"] == 0, (s.name, res)
        if s.split:
            assert res["regs_per_thread"] <= 65536 // (s.threads * max(1, 1024 // s.threads)), (s.name, res)


ODD = [Softmax(3000, 50257, "fp16"), Softmax(1024, 32001, "bf16"), Softmax(4096, 4097), Softmax(65536, 129, "fp16"),
       Softmax(8, 128257, "fp16"), Softmax(37, 1001, "bf16"), Softmax(5, 1002, "fp16"), Softmax(3, 50257)]


@pytest.mark.parametrize("arch", ("sm_80", "sm_90a"))
@pytest.mark.parametrize("op", ODD, ids=lambda op: op.signature)
def test_odd_rows_compile_without_spills(op, arch, kernel_home, monkeypatch):
    """Rows the 16-byte vector does not divide: the hero (16-byte slots) and a sample of every form, without
    spills wherever the same schedule has none on the aligned row length below (some candidates of the
    space spill at any length: 1024 threads holding 56 elements)."""
    pytest.importorskip("cuda.core")
    from tracea.emitters import cuda
    from tracea.emitters import nvrtc as nv
    from tracea.emitters.cuda.build import compile_kernel

    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))
    try:
        nv.find_nvrtc()
    except Exception:  # noqa: BLE001 - no NVRTC here
        pytest.skip("NVRTC is not installed")
    hero = cuda.hero_schedule(op, VID, NoGpu(), arch=arch)
    assert hero.vec == 16 // op.dtype.itemsize, hero.name
    space = cuda.search_space(op, VID, NoGpu(), arch)
    forms = {}
    for c in space:  # one of each form, then every 8th (for sm_90a: sm_80 has the same register file, and
        forms.setdefault((bool(c.lanes), bool(c.split), bool(c.persist), bool(c.chunks)), c)  # its forms suffice)
    twin = Softmax(op.rows, op.cols - op.cols % hero.vec, op.dtype.value)
    for s in {hero, *forms.values(), *(space[::8] if arch == "sm_90a" else [])}:
        _, r, _, art = compile_kernel(op, VID, s, NoGpu(), arch)
        res = art.metadata["resources"]
        assert "xe[q]" in r.source and "ye[q]" in r.source, s.name  # the partial-slot path is in
        if s == hero or compile_kernel(twin, VID, s, NoGpu(), arch)[3].metadata["resources"]["spills"] == 0:
            assert res["spills"] == 0 and res["stack_frame"] == 0, (s.name, res)
        if s.split:
            assert res["regs_per_thread"] <= 65536 // (s.threads * max(1, 1024 // s.threads)), (s.name, res)


# ------------------------------------------------------------------------------- on a GPU
def _device_host():
    from cuda.core import Device

    return host_with(int(Device(0).properties.multiprocessor_count))


def _check(op, schedule, seed: int) -> None:
    from tracea.emitters import cuda

    k = cuda.build(op, VID, schedule, NoGpu())
    inputs = op.random_inputs(np.random.default_rng(seed))
    out = np.full(op.output_shape(), np.nan if op.dtype.value != "bf16" else 0x7FC0, op.dtype.storage)
    k(inputs, out)
    ref = op.reference(inputs)
    got = to_float64(out, op.dtype)
    err = relative_error(got, ref)
    assert err <= tolerance(op), (schedule.name, err)
    assert np.all(np.abs(got.sum(axis=1) - 1) <= 64 * tolerance(op)), schedule.name
    again = k(inputs)  # deterministic: the split form merges its parts in one order
    np.testing.assert_array_equal(again, out)


@pytest.fixture
def _gpu_home(kernel_home, monkeypatch):
    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))


@pytest.mark.gpu
@pytest.mark.usefixtures("_gpu_home")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,cols", shapes())
def test_hero_matches_the_reference(rows, cols, dtype):
    op = Softmax(rows, cols, dtype)
    _check(op, hero_schedule(op, _device_host()), seed=rows * 7 + cols)


@pytest.mark.gpu
@pytest.mark.usefixtures("_gpu_home")
@pytest.mark.parametrize("op", [Softmax(1000, 128, "fp16"), Softmax(77, 1000), Softmax(5, 31, "bf16"),
                                Softmax(5, 50257, "bf16"), Softmax(2, 32000, "fp16"), Softmax(1, 131072)],
                         ids=lambda op: op.signature)
def test_every_new_candidate_matches_the_reference(op):
    from tracea.emitters import cuda

    for s in cuda.search_space(op, VID, NoGpu()):
        if s.lanes or s.split:
            _check(op, s, seed=5)


TIMED = [Softmax(65536, 128), Softmax(131072, 128, "fp16"), Softmax(65536, 256, "bf16"), Softmax(32768, 512, "fp16"),
         Softmax(4096, 1000), Softmax(8192, 8192), Softmax(1, 32000, "fp16"), Softmax(8, 50257, "bf16"),
         Softmax(1, 65536), Softmax(16, 128256, "bf16"), Softmax(64, 128256, "fp16"), Softmax(4, 256000)]


@pytest.mark.gpu
@pytest.mark.usefixtures("_gpu_home")
def test_events_timing_beside_torch(capsys):
    """A sanity run, no speed asserted: the hero's median and torch.softmax's on the same inputs."""
    from tracea.emitters import cuda

    try:
        import torch
    except ImportError:
        torch = None
    host = _device_host()
    lines = []
    for op in TIMED:
        s = hero_schedule(op, host)
        k = cuda.build(op, VID, s, NoGpu())
        inputs = op.random_inputs(np.random.default_rng(1))
        t = k.time(inputs, warmup=3, repeats=20)
        assert 0 < t.min_ms <= t.p50_ms <= t.p95_ms
        gbs = op.bytes / t.p50_ms / 1e6
        line = f"{op.signature:48s} {s.name:22s} {t.p50_ms * 1e3:9.1f} us {gbs:7.0f} GB/s"
        if torch is not None and torch.cuda.is_available():
            tt = _torch_ms(torch, op, inputs)
            line += f"  torch {tt * 1e3:9.1f} us  ratio {tt / t.p50_ms:5.2f}x"
        lines.append(line)
    with capsys.disabled():
        print("\n" + "\n".join(lines))


def _torch_ms(torch, op, inputs) -> float:
    dt = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[op.dtype.value]
    x = torch.from_numpy(to_float64(inputs["x"], op.dtype)).to("cuda", dt)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(3):
        torch.softmax(x, dim=-1)
    ms = []
    for _ in range(20):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.softmax(x, dim=-1)
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    return float(np.median(ms))
