#!/usr/bin/env bash
# One device-machine session for the doctor: install, live report, snapshot + replay, --measure,
# CUDA_VISIBLE_DEVICES handling, the gpu-marked tests, and process timings. Everything lands in $OUT.
# Usage (device tool): bash benchmarks/gpu/doctor_gpu_checks.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# Textual and what it needs, carried as wheels (the image has none): only for the TUI test.
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >"$OUT/install.log" 2>&1
fi
# Tracea itself last, with --upgrade: a wheel above (markdown-it-py) made bin/, which pip --target
# keeps unless told to replace it, and then tracea would have no console script.
python3 -m pip install -q --no-deps --no-build-isolation --upgrade --target /tmp/site . >>"$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
{
  echo "== machine"; nvidia-smi --query-gpu=name,uuid,pci.bus_id,compute_cap,memory.total,clocks.max.sm,clocks.max.mem,power.limit,persistence_mode,mig.mode.current,pcie.link.gen.max,pcie.link.width.max --format=csv
  nvidia-smi | head -4 | tail -2
  python3 -c "import sys, typer, rich, pynvml, cuda.core, cuda.bindings, numpy; print(sys.version.split()[0], 'typer', typer.__version__, 'rich?', 'cuda.core', cuda.core.__version__, 'numpy', numpy.__version__)"
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

echo "== live report (plain)"
tracea doctor --plain --save "$OUT/h100_snapshot.json" | tee "$OUT/doctor_live.txt"
echo "rc=$?"
tracea doctor --json >"$OUT/doctor_live.json"; echo "json rc=$?"

echo "== replay equals live"
python3 - "$OUT/h100_snapshot.json" <<'PY'
import json, sys
from tracea.doctor.snapshot import load_snapshot
doc = json.load(open(sys.argv[1]))
replayed = load_snapshot(sys.argv[1]).to_json()
saved = doc["report"]
for d in (replayed, saved):
    d.pop("origin")
print("replay identical to live report:", json.dumps(replayed, sort_keys=True) == json.dumps(saved, sort_keys=True))
PY
tracea doctor --input "$OUT/h100_snapshot.json" --plain >"$OUT/doctor_replay.txt"
diff <(sed 1d "$OUT/doctor_live.txt" | grep -v 'snapshot saved') <(sed 1d "$OUT/doctor_replay.txt") && echo "rendered replay identical to live (after the title line)"

echo "== CUDA_VISIBLE_DEVICES"
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
for cvd in "" "0" "${UUID:0:12}" "$UUID" "7" "0,0"; do
  printf 'CUDA_VISIBLE_DEVICES=%-20q -> ' "$cvd"
  CUDA_VISIBLE_DEVICES="$cvd" tracea doctor --json | python3 -c "import json,sys; d=json.load(sys.stdin)['nvidia']; print(len(d['devices']), 'visible,', d['hidden_by_cuda_visible_devices'], 'hidden;', d['reason'])"
done

echo "== measure"
tracea doctor --measure --plain --save "$OUT/h100_snapshot_measured.json" | sed -n '/^Ceilings/,/^Checks/p' | tee "$OUT/doctor_measure.txt"

echo "== where the live probe spends its time (ms)"
python3 -c "
import json, time
t=time.perf_counter(); import cuda.core; a=time.perf_counter()-t
from cuda.bindings import driver; t=time.perf_counter(); driver.cuInit(0); b=time.perf_counter()-t
t=time.perf_counter(); d=cuda.core.Device(0); p=d.properties; x=p.multiprocessor_count; c=time.perf_counter()-t
print(f'import cuda.core {a*1e3:.0f}, cuInit {b*1e3:.0f}, Device(0)+first attribute {c*1e3:.0f}')
from tracea.doctor.snapshot import collect_raw
for i in range(3): print(collect_raw()['timings_ms'])
"

echo "== gpu tests (live probe, measure, TUI with real NVML telemetry)"
python3 -m pytest -q -m gpu tests/ -p no:cacheprovider 2>&1 | tail -15

echo "== process timings (median of 7)"
python3 benchmarks/bench_startup.py --repeat 7 2>&1 | tee "$OUT/startup_gpu.txt"
