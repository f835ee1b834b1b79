# Sourced first by the GPU session scripts: logs go to $RES ($OUT, else ./.out), Python unbuffered, a fresh
# TRACEA_HOME (nothing tuned or cached from before) unless one is given, $PY, and `tracea` imported from
# this checkout with nothing installed (shim.sh).
set -uo pipefail
RES=${OUT:-$PWD/.out}
mkdir -p "$RES"
export PYTHONUNBUFFERED=1 TRACEA_HOME=${TRACEA_HOME:-$(mktemp -d)}
PY=${PYTHON:-python3}
. benchmarks/gpu/shim.sh
