#!/usr/bin/env bash
# Issue 26 item 6 in one device call on a two-GPU host (nvidia-h100-x2, .whl and .kb carried): bench/memory_load.py
# on KernelBench 23_Softmax on GPU 0 and 36_RMSNorm_ on GPU 1 at their shipped sizes, each with --branches 8 then
# --branches 2 (each run killed past LIMIT seconds; what it archived by then counts). One 80 GB GPU per run: the
# two lanes never share a GPU. JSON lines land in $OUT/memory_load.jsonl; the table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kw-out}
LIMIT=${LIMIT:-270}
ITER8=${ITER8:-16}
ITER2=${ITER2:-8}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --no-build-isolation --upgrade --target /tmp/site . >/dev/null 2>&1 || {
  echo "installing kernelwright failed"; exit 1; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH
lane() {  # GPU PROBLEM
  for b in 8 2; do
    it=$ITER8; [ "$b" = 2 ] && it=$ITER2
    CUDA_VISIBLE_DEVICES=$1 python3 bench/memory_load.py --problem ".kb/level1/$2.py" --branches $b --iterations $it \
      --limit "$LIMIT" --recheck 2 --out "/tmp/kwl/lane$1" > "$OUT/lane$1-b$b.log" 2>&1
    echo "lane $1 $2 b$b rc=$?"
  done
}
lane 0 23_Softmax & lane 1 36_RMSNorm_ & wait
cat /tmp/kwl/lane*/memory_load.jsonl > "$OUT/memory_load.jsonl" 2>/dev/null
python3 bench/memory_load.py --report "$OUT/memory_load.jsonl"
