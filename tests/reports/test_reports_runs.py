"""Run folders (ids, manifest, finding them again), IR dumps through `tracea emit --dump-ir`, the kernel
metadata YAML for CPU and CUDA-shaped artifacts, NVTX phases in bench, and `tracea report`."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tracea.doctor.errors import BadInputError
from tracea.doctor.report import Ceiling, HostReport
from tracea.emitters import nvtx
from tracea.reports import runs
from tracea.reports.irdump import dump_kernel, kernel_metadata
from tracea.reports.metrics import MetricsRow, MetricsWriter
from tracea.reports.summary import roofline_ceilings, summarise


def tracea(*args: str, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracea", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TRACEA_HOME": str(home)})


def test_runs_ids_manifest_and_lookup(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEA_HOME", str(tmp_path))
    assert runs.latest() is None
    with pytest.raises(BadInputError, match="no runs yet"):
        runs.find_run("LAST")
    a = runs.start_run("bench", ["bench", "gemm"], None)
    b = runs.start_run("tune", ["tune", "gemm"], None)
    assert a.path.parent == tmp_path / "runs" and runs.ID_RE.match(a.id) and "-bench-" in a.id
    assert runs.latest().id == b.id and runs.latest("bench").id == a.id
    assert runs.find_run(a.id).id == a.id and runs.find_run(str(b.path)).id == b.id
    assert runs.find_run(a.id[:-2]).id == a.id
    a.add_json("result.json", {"x": 1})
    a.record(best={"p50_ms": 1.0})
    a.finish("wrong_result", "relative error 1 exceeds 1e-4")
    m = json.loads((a.path / "manifest.json").read_text())
    assert m["status"] == "wrong_result" and m["best"] == {"p50_ms": 1.0} and m["finished_at"]
    assert json.loads((a.path / "environment.json").read_text())  # the run's environment, redacted
    for bad in ("../escape.txt", "/etc/x", ""):
        with pytest.raises(BadInputError, match="relative path inside the run folder"):
            a.add_file(bad, "x")
    with pytest.raises(BadInputError, match="run kind"):
        runs.start_run("Bad Kind", [], None)
    (a.path / "manifest.json").write_text(json.dumps({**m, "schema_version": 7}))
    with pytest.raises(BadInputError, match="schema_version 7"):
        runs.load_run(a.path)


def test_emit_dump_ir_every_stage_in_order(tmp_path):
    out = tracea("emit", "gemm", "--m", "32", "--epilogue", "bias,relu", "--out", str(tmp_path / "src"),
                 "--dump-ir", str(tmp_path / "ir"), "--json", home=tmp_path / "home")
    assert out.returncode == 0, out.stderr
    (folder,) = list((tmp_path / "ir").iterdir())
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["00_op.json", "01_decision.json", "02_schedule.json", "03_source.c", "04_compile.json",
                     "05_binary.so", "07_metadata.yaml"]
    emitted_c = next((tmp_path / "src").glob("*.c")).read_text()
    assert (folder / "03_source.c").read_text() == emitted_c  # the source that was compiled is the emitted one
    meta = yaml.safe_load((folder / "07_metadata.yaml").read_text())
    assert meta["epilogue"] == ["bias", "relu"] and meta["fragments"]["dtype_acc"] == "fp32"
    assert json.loads((folder / "01_decision.json").read_text())["chosen"] == meta["variant"]
    assert str(folder / "07_metadata.yaml") in json.loads(out.stdout)["files"]


def test_emit_dump_ir_unwritable_is_exit_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = tracea("emit", "softmax", "--rows", "4", "--cols", "8", "--out", str(tmp_path / "src"),
                 "--dump-ir", str(blocker / "ir"), home=tmp_path / "home")
    assert out.returncode == 2 and out.stderr.startswith("error: dump-ir: cannot create"), out.stderr


def test_cuda_shaped_artifact_metadata_and_dump(tmp_path):
    """A CUDA artifact (the CUDA backend's field names) fills DESIGN.md's resources; a cubin is copied."""
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(b"\x7fELF fake cubin bytes")
    art = {"name": "gemm_bf16_sm90", "source": "__global__ void k() {}", "language": "cuda", "entry": "k",
           "compiler": "nvrtc", "compiler_version": "12.8", "flags": ["--gpu-architecture=sm_90a"],
           "binary": str(cubin), "cache_hit": False, "compile_seconds": 0.2,
           "metadata": {"registers": 96, "shared_bytes": 49152, "spills": 0, "compile_log": "ok",
                        "tile": {"M": 128, "N": 128, "K": 64, "stages": 3},
                        "launch": {"grid": [32, 32, 1], "block": [256, 1, 1]}}}
    meta = kernel_metadata(art)
    assert meta["resources"]["regs_per_thread"] == 96 and meta["resources"]["smem_per_cta"] == 49152
    assert meta["tile"] == {"M": 128, "N": 128, "K": 64, "stages": 3} and meta["fragments"]["mma"] is None
    paths = dump_kernel(tmp_path / "ir", {"op": "gemm", "m": 1}, None, {"backend": "cuda"}, art, index=3)
    names = [p.name for p in paths]
    assert paths[0].parent.name == "0003_gemm_bf16_sm90"
    assert names[:5] == ["00_op.json", "02_schedule.json", "03_source.cu", "04_compile.json", "05_binary.cubin"]
    assert json.loads((paths[0].parent / "04_compile.json").read_text())["log"] == "ok"


class _Recorder:
    def __init__(self) -> None:
        self.ranges: list[tuple[str, str | None]] = []

    def annotate(self, message, color, domain, category):
        self.ranges.append((message, category))
        assert domain == "tracea"
        return contextlib.nullcontext()


def test_bench_phases_are_nvtx_ranges(monkeypatch):
    from tracea.doctor import probe
    from tracea.emitters.bench import bench
    from tracea.kernels import Gemm

    rec = _Recorder()
    monkeypatch.setattr(nvtx, "_nvtx", rec)
    result = bench(Gemm(m=24, n=16, k=8), probe(), repeats=2, warmup=1, min_seconds=0.0)
    assert result.status == "ok"
    assert rec.ranges == [("host", "compile"), ("host", "verify"), ("host", "verify"), ("mma", "time")]
    with pytest.raises(ValueError, match="not one of"):
        with nvtx.phase("gpu"):
            pass


def test_nvtx_absent_is_a_no_op(monkeypatch):
    monkeypatch.setattr(nvtx, "_nvtx", None)
    monkeypatch.setitem(sys.modules, "nvtx", None)  # import nvtx raises ImportError
    assert not nvtx.available()
    with nvtx.phase("mma", "time"):
        ran = True
    assert ran


def _rows(path: Path) -> None:
    w = MetricsWriter(path)
    for i, (m, status) in enumerate([(64, "ok"), (128, "ok"), (128, "ok"), (256, "runtime_failed")]):
        ok = status == "ok"
        w.write(MetricsRow(timestamp=f"t{i}", op="gemm", shape=json.dumps({"m": m, "n": m, "k": m}), dtype="fp32",
                           backend="cpu", variant="cpu-avx2-fma.gemm", schedule=json.dumps({"i": i}), status=status,
                           p50_ms=0.1 * (i + 1) if ok else None, p95_ms=0.2 * (i + 1) if ok else None,
                           tflops=2 * m ** 3 / (0.1 * (i + 1) * 1e-3) / 1e12 if ok else None,
                           gbps=12 * m * m / (0.1 * (i + 1) * 1e-3) / 1e9 if ok else None, rel_err=1e-7 if ok else None,
                           baseline="numpy.matmul (openblas)", baseline_p50_ms=0.15 if ok else None,
                           ratio=0.15 / (0.1 * (i + 1)) if ok else None, env_fingerprint="f"))


def test_summary_and_roofline_ceilings(tmp_path):
    _rows(tmp_path / "m.csv")
    from tracea.reports.metrics import read_metrics

    rows = read_metrics(tmp_path / "m.csv")
    groups = {g.shape: g.to_json() for g in summarise(rows)}
    assert groups["128x128x128"]["rows"] == 2 and groups["128x128x128"]["best_p50_ms"] == pytest.approx(0.2)
    assert groups["256x256x256"]["statuses"] == {"runtime_failed": 1} and groups["256x256x256"]["best_tflops"] is None
    host = HostReport(ceilings=[
        Ceiling(device="cpu", metric="fp32_flops", unit="FLOP/s", spec=1e12, basis="spec basis", measured=8e11, method="fma"),
        Ceiling(device="cpu", metric="memory_bandwidth", unit="B/s", reason="not readable", measured=2e10, method="triad"),
    ])
    device, ceilings, notes = roofline_ceilings(host, rows)
    assert device == "cpu (fp32)"
    assert [(c.label, c.flops, c.bandwidth) for c in ceilings] == [("spec", 1e12, None), ("measured", 8e11, 2e10)]
    assert notes == []
    _, _, notes = roofline_ceilings(HostReport(ceilings=host.ceilings[:1]), rows)
    assert notes and "memory bandwidth" in notes[0]


def test_report_table_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    _rows(tmp_path / "m.jsonl")
    out = tracea("report", str(tmp_path / "m.jsonl"), "--plot", str(tmp_path / "p.png"), home=tmp_path / "home")
    assert out.returncode == 0, out.stderr
    assert "4 rows, 3 configurations" in out.stdout and "runtime_failed 1" in out.stdout
    import matplotlib.image

    img = matplotlib.image.imread(tmp_path / "p.png")
    assert img.shape[0] > 400 and img.shape[1] > 1000 and img.std() > 0.05  # a drawn picture, not a blank one
    js = tracea("report", str(tmp_path / "m.jsonl"), "--json", home=tmp_path / "home")
    assert [g["shape"] for g in json.loads(js.stdout)] == ["64x64x64", "128x128x128", "256x256x256"]


def test_report_bad_input(tmp_path):
    home = tmp_path / "home"
    out = tracea("report", str(tmp_path / "absent.csv"), home=home)
    assert out.returncode == 2 and out.stderr.startswith("error: metrics file not found"), out.stderr
    (tmp_path / "x.txt").write_text("hi")
    out = tracea("report", str(tmp_path / "x.txt"), home=home)
    assert out.returncode == 2 and "extension must be .csv or .jsonl" in out.stderr
    _rows(tmp_path / "m.csv")
    out = tracea("report", str(tmp_path / "m.csv"), "--plot", str(tmp_path / "p.bmp"), home=home)
    assert out.returncode == 2 and "must be .png, .svg or .pdf" in out.stderr, out.stderr


def test_plot_without_matplotlib_says_how_to_install(tmp_path, monkeypatch, capsys):
    from tracea.__main__ import main

    _rows(tmp_path / "m.csv")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code = main(["report", str(tmp_path / "m.csv"), "--plot", str(tmp_path / "p.png")])
    err = capsys.readouterr().err
    assert code == 3 and err.startswith("error: --plot needs matplotlib, which is not installed")
    assert "pip install 'tracea[plot]'" in err and not (tmp_path / "p.png").exists()
