"""First-compile time of ``torch.compile(model, backend="tracea")`` against Inductor's, each with cold caches:
every (model, mode, backend) in a fresh process with empty ``TRACEA_HOME``, ``TORCHINDUCTOR_CACHE_DIR`` and
``TRITON_CACHE_DIR``, so that neither finds the other's work (in one process the second backend to compile a
graph finds Inductor's caches warm). The figure is the wall time of the compiled model's first call (Dynamo's
trace, the backend, Tracea's builds and measurements, Inductor's compile, the first run), after the model
and input are on the GPU. The models are ``ops_compile_models.py``'s.

    python benchmarks/gpu/ops_compile_cold.py [--models block resnet50] [--modes default reduce-overhead]

Needs a GPU, PyTorch and torchvision (for resnet50).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def child(model_name: str, mode: str, backend: str) -> None:
    import torch
    from ops_compile_models import models

    import tracea

    tracea.ops.register_compile_backend()
    with torch.inference_mode():
        (label, model, x), = models([model_name])
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn = torch.compile(model, backend=backend, mode=None if mode == "default" else mode)
        fn(x)
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
        report = tracea.ops.last_report() if backend == "tracea" else None
    swapped = len(report["replaced"]) if report else None
    print(json.dumps({"label": label, "first_s": first, "swapped": swapped,
                      "seconds": report.get("seconds") if report else None}))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["block", "resnet50"])
    ap.add_argument("--modes", nargs="+", default=["default", "reduce-overhead"])
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    here = os.path.dirname(os.path.abspath(__file__))
    rows = []
    for model in args.models:
        for mode in args.modes:
            got = {}
            for backend in ("inductor", "tracea"):
                with tempfile.TemporaryDirectory() as tmp:
                    env = {**os.environ, "TRACEA_HOME": os.path.join(tmp, "tracea"),
                           "TORCHINDUCTOR_CACHE_DIR": os.path.join(tmp, "inductor"),
                           "TRITON_CACHE_DIR": os.path.join(tmp, "triton"),
                           "PYTHONPATH": here + os.pathsep + os.environ.get("PYTHONPATH", "")}
                    proc = subprocess.run([sys.executable, __file__, "--child", model, mode, backend], env=env,
                                          capture_output=True, text=True, timeout=600)
                line = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
                if proc.returncode != 0 or not line.startswith("{"):
                    print(f"{model} {mode} {backend}: failed (exit {proc.returncode})\n{proc.stderr[-1500:]}")
                    break
                got[backend] = json.loads(line)
            if len(got) == 2:
                i, t = got["inductor"], got["tracea"]
                secs = t["seconds"] or {}
                rows.append(f"| {i['label']} | {mode} | {i['first_s']:.1f} | {t['first_s']:.1f} | "
                            f"{t['first_s'] / i['first_s']:.2f}x | {t['swapped']} | "
                            + ", ".join(f"{k} {v:.1f}" for k, v in secs.items()) + " |")
    import torch

    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; first call s, each in a fresh process "
          "with cold caches\n")
    print("| model | mode | Inductor | tracea | tracea / Inductor | nodes on Tracea | tracea's report, s |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
