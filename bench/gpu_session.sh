#!/usr/bin/env bash
# One GPU call's worth of checks for the evaluation service at real sizes (run through the device tool
# with .whl and .kb carried; .kb holds KernelBench's problem folders level1..level3, never committed).
#   bash bench/gpu_session.sh smoke            examples through `kernelwright eval` on cuda (shared buffers)
#   bash bench/gpu_session.sh baseline FILES   `kernelwright baseline --json` on each problem file
#   bash bench/gpu_session.sh eval PROBLEM CANDIDATE...   `kernelwright eval --json` of candidates
#   bash bench/gpu_session.sh pytest ARGS      pytest on the GPU host
# JSON lines and logs land in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kw-out}
mkdir -p "$OUT"
if [ ! -d /tmp/site/kernelwright ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --upgrade --target /tmp/site . >/dev/null 2>&1 || {
    echo "installing kernelwright failed"; exit 1; }
fi
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
kw() { python3 -m kernelwright.cli "$@"; }
what=${1:-smoke}; shift || true
case "$what" in
  smoke)
    for ex in examples/*/; do
      s=$(date +%s.%N)
      kw eval "$ex/problem.py" "$ex/seed.py" --device cuda --json > "$OUT/smoke-$(basename $ex).json" 2> "$OUT/smoke-$(basename $ex).err"
      rc=$?; e=$(date +%s.%N)
      python3 bench/kb_table.py eval "$OUT/smoke-$(basename $ex).json" --rc $rc --wall $(python3 -c "print($e-$s)")
      tail -3 "$OUT/smoke-$(basename $ex).err"
    done
    ;;
  baseline)
    for p in "$@"; do
      s=$(date +%s.%N)
      timeout 400 python3 -m kernelwright.cli baseline "$p" --device cuda --json >> "$OUT/baseline.jsonl" 2>> "$OUT/baseline.err"
      rc=$?; e=$(date +%s.%N)
      echo "$p rc=$rc wall=$(python3 -c "print(round($e-$s,1))")s"
    done
    python3 bench/kb_table.py baseline "$OUT/baseline.jsonl"
    ;;
  eval)
    prob=$1; shift
    for c in "$@"; do
      s=$(date +%s.%N)
      kw eval "$prob" "$c" --device cuda --json > "$OUT/eval-$(basename $c .py).json" 2> "$OUT/eval-$(basename $c .py).err"
      rc=$?; e=$(date +%s.%N)
      python3 bench/kb_table.py eval "$OUT/eval-$(basename $c .py).json" --rc $rc --wall $(python3 -c "print($e-$s)")
    done
    ;;
  pytest)
    python3 -m pytest -p no:cacheprovider -q "$@" 2>&1 | tee -a "$OUT/pytest.log" | tail -40
    ;;
esac
