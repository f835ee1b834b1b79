# Sourced first by the GPU session scripts: logs go to $RES ($OUT, else ./.out), Python unbuffered, a fresh
# TRACEA_HOME (nothing tuned or cached from before) unless one is given, $PY, and `tracea` imported from
# this checkout with nothing installed (shim.sh).
set -uo pipefail
RES=${OUT:-$PWD/.out}
mkdir -p "$RES"
export PYTHONUNBUFFERED=1 TRACEA_HOME=${TRACEA_HOME:-$(mktemp -d)}
PY=${PYTHON:-python3}
. benchmarks/gpu/shim.sh

# sanitize TAG CASE...: compute-sanitizer's memcheck, racecheck and synccheck over those cases of
# sanitize_cases.py, each tool's log in $RES/sanitize_TAG_TOOL.txt and one summary line a tool in
# $RES/sanitize_TAG_summary.txt (its exit code and the summary lines the tool printed).
sanitize() {
  local tag=$1 tool extra san
  shift
  san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in memcheck racecheck synccheck; do
    extra=$([ $tool = memcheck ] && echo "--leak-check full" || ([ $tool = racecheck ] && echo "--racecheck-report all"))
    timeout ${SAN_TIMEOUT:-100} $san --tool $tool --report-api-errors no --print-limit 20 --error-exitcode 99 $extra \
      $PY benchmarks/gpu/sanitize_cases.py "$@" --under-sanitizer > "$RES/sanitize_${tag}_$tool.txt" 2>&1
    echo "$tool rc=$? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$RES/sanitize_${tag}_$tool.txt" | sort | uniq -c | tr '\n' ' ')" \
      | tee -a "$RES/sanitize_${tag}_summary.txt"
  done
}
