#!/usr/bin/env bash
# Issue 26 item 6 on a one-GPU host (nvidia-h100-x1, .whl and .kb carried): bench/memory_load.py runs one after
# another, each "PROBLEM:BRANCHES:ITERATIONS" (KernelBench level1 names), each killed past LIMIT seconds.
#   bash bench/memory_load_one.sh 23_Softmax:8:16 23_Softmax:2:8 36_RMSNorm_:8:16
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kw-out}
LIMIT=${LIMIT:-170}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-build-isolation --upgrade --target /tmp/site . >/dev/null 2>&1 || {
  echo "installing kernelwright failed"; exit 1; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH
for run in "$@"; do
  IFS=: read -r problem branches iterations <<< "$run"
  python3 bench/memory_load.py --problem ".kb/level1/$problem.py" --branches "$branches" --iterations "$iterations" \
    --limit "$LIMIT" --recheck 1 --out /tmp/kwl > "$OUT/$problem-b$branches.log" 2>&1
  echo "$problem b$branches rc=$?"
done
cp /tmp/kwl/memory_load.jsonl "$OUT/memory_load.jsonl"
python3 bench/memory_load.py --report "$OUT/memory_load.jsonl"
