"""`tracea bank-sim`: JSON results that reproduce the measured patterns, tile sweeps, the text view and
heatmap, and bad input as one error line (plus hint) with exit 2 and never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

LANE = list(range(32))


def tracea(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracea", *args], capture_output=True, text=True, timeout=120)


def write(tmp_path, doc, name="p.json"):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def test_pattern_json_reproduces_measured_counts(tmp_path, fixtures):
    fixture = json.loads((fixtures / "bank_patterns" / "h100_2026-11-21.json").read_text())
    picked = [p for p in fixture["patterns"] if p["name"] in {
        "ld32_stride2w", "ld64_pairs_share", "ld128_broadcast", "st128_broadcast", "ldmx4_matrices_same",
        "ldmatrix.x4_bf16_128x64_tma128B#0", "ld128col_bf16_128x64_row#0", "cpasync32_broadcast", "st64_halves_same",
        "stmx2_rows_stride128B", "rand_ld64_06", "ld32_halfwarp_stride2w"}]
    assert len(picked) == 12
    doc = {"instructions": [{k: p[k] for k in ("op", "bytes_per_lane", "addresses")} for p in picked]}
    out = tracea("bank-sim", "--pattern", write(tmp_path, doc), "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert [i["wavefronts"] for i in got["instructions"]] == [p["wavefronts"] for p in picked]
    assert all(i["conflicts"] == p["bank_conflicts"] for i, p in zip(got["instructions"], picked, strict=True)
               if p["bank_conflicts"] is not None)
    assert got["schema_version"] == 1 and got["totals"]["wavefronts"] == sum(p["wavefronts"] for p in picked)


def test_json_fields(tmp_path):
    doc = {"instructions": [{"op": "ld", "bytes_per_lane": 4, "addresses": [8 * i for i in LANE], "count": 3,
                             "name": "B loop"}]}
    got = json.loads(tracea("bank-sim", "--pattern", write(tmp_path, doc), "--json").stdout)
    ins = got["instructions"][0]
    assert ins == {"index": 0, "op": "ld", "bytes_per_lane": 4, "wavefronts": 2, "ideal": 1, "conflicts": 1,
                   "conflict_degree": 2, "colliding_banks": list(range(0, 32, 2)), "group_lanes": 32, "count": 3,
                   "name": "B loop"}
    assert got["totals"]["wavefronts"] == 6 and got["pattern"].endswith("p.json")


def test_tile_sweep_json_and_text():
    args = ("bank-sim", "--layout", "128x64", "--dtype", "bf16", "--swizzle", "128B", "--access", "ldmatrix.x4",
            "--access", "cp.async.128.row")
    got = json.loads(tracea(*args, "--json").stdout)
    assert got["totals"] == {"instructions": 64, "wavefronts": 256, "ideal": 256, "conflicts": 0,
                             "conflicted_instructions": 0, "max_conflict_degree": 1, "efficiency": 1.0}
    assert got["layout"]["swizzle"]["cutlass"]["bits"] == 3 and got["access"] == ["ldmatrix.x4", "cp.async.128.row"]
    text = tracea(*args)
    assert text.returncode == 0 and "efficiency 100%" in text.stdout and "\x1b[" not in text.stdout  # a pipe: plain


def test_text_heatmap_of_the_worst_instruction():
    out = tracea("bank-sim", "--layout", "128x64", "--dtype", "bf16", "--access", "ldmatrix.x4", "--limit", "2")
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert any("... 30 more" in ln for ln in lines)
    heat = [ln for ln in lines if ln[:4].strip().isdigit() and set(ln[5:]) <= set(".123456789abcdefghijklmnopqrstuvw")]
    assert len(heat) == 32 and heat[7].split()[1].startswith("8888")  # lane 7: 8th wavefront of banks 0-3


@pytest.mark.parametrize(("doc", "needle"), [
    ({"instructions": [{"op": "ld", "bytes_per_lane": 4, "addresses": [0, 4]}]}, "2 addresses given, a warp needs 32"),
    ({"instructions": [{"op": "ld", "bytes_per_lane": 8, "addresses": [4] + [0] * 31}]}, "not aligned to the 8-byte"),
    ({"instructions": [{"op": "lds", "bytes_per_lane": 4, "addresses": [0] * 32}]}, "unknown op 'lds'"),
    ({"instructions": [{"op": "ld", "bytes_per_lane": 12, "addresses": [0] * 32}]}, "bytes_per_lane 12"),
    ({"instructions": [{"op": "ld", "bytes_per_lane": 4, "addresses": [0] * 32, "lanes": 3}]}, "unknown field"),
    ({"instructions": [{"op": "ldmatrix.x4", "addresses": [None] * 32}]}, "lane 0 is null"),
    ({"instructions": [{"op": "ld", "bytes_per_lane": 4, "addresses": ["a"] * 32}]}, "is not a byte offset"),
    ({"instructions": []}, "non-empty \"instructions\""),
    ([1, 2], "non-empty \"instructions\""),
    ('{"instructions": [', "is not valid JSON"),
])
def test_bad_pattern_is_one_line_exit_2(tmp_path, doc, needle):
    out = tracea("bank-sim", "--pattern", write(tmp_path, doc))
    assert out.returncode == 2
    first, *rest = out.stderr.splitlines()
    assert first.startswith("error: ") and needle in first, out.stderr
    assert all(ln.startswith("hint: ") for ln in rest) and "Traceback" not in out.stderr and not out.stdout


@pytest.mark.parametrize(("args", "needle"), [
    (("--pattern", "/nonexistent/p.json"), "cannot read /nonexistent/p.json"),
    (("--layout", "128by64", "--access", "ldmatrix.x4"), "is not ROWSxCOLS"),
    (("--layout", "128x64", "--dtype", "fp7", "--access", "ldmatrix.x4"), "unknown --dtype"),
    (("--layout", "128x64", "--swizzle", "256B", "--access", "ldmatrix.x4"), "unknown swizzle"),
    (("--layout", "128x64", "--access", "ld.96"), "moves"),
    (("--layout", "128x64"), "needs at least one --access"),
    (("--layout", "64x64", "--dtype", "fp8", "--swizzle", "xor8", "--access", "ld.128"), "Xor8"),
    (("--layout", "128x64", "--access", "ldmatrix.x4", "--heatmap", "99"), "--heatmap 99"),
    (("--layout", "128x64", "--pattern", "x.json", "--access", "ld.128"), "either --pattern"),
])
def test_bad_options_are_one_line_exit_2(args, needle):
    out = tracea("bank-sim", *args)
    assert out.returncode == 2
    first = out.stderr.splitlines()[0]
    assert first.startswith("error: ") and needle in first, out.stderr
    assert "Traceback" not in out.stderr


def test_help_lists_the_command_and_stays_light():
    out = tracea("--help")
    assert "bank-sim" in out.stdout
    code = ("import sys\nfrom tracea.__main__ import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('numpy' in sys.modules, 'tracea.emitters.bank_sim' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.stdout.strip().splitlines()[-1] == "False False"
