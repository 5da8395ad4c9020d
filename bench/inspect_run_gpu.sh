#!/usr/bin/env bash
# Issue 12 on a GPU host (the device tool): a real run at KernelBench's size, then what is read from it:
# its report's inputs (the run directory comes back in $OUT/runs.tgz; the page and its screenshot are made
# where Chromium is), its export in every format with and without the gain filter, and a handoff of its
# best kernel whose own pytest and benchmark are run here, on the GPU, in a clean environment that has
# torch, triton and pytest but no kernelwright.
#   bench/inspect_run_gpu.sh PROBLEM SEED [ITERATIONS] [TIME_BUDGET]
set -uo pipefail
OUT=${OUT:-/tmp/kw-out}
mkdir -p "$OUT"
PROBLEM=$1 SEED=$2 ITER=${3:-12} BUDGET=${4:-150s}
kw() { python3 -m kernelwright.cli "$@"; }
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())'
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
rm -rf runs
t0=$(date +%s)
kw optimize "$PROBLEM" --seed-kernel "$SEED" --device cuda --iterations "$ITER" --branches 2 --time-budget "$BUDGET" \
  --profile auto > "$OUT/optimize.log" 2>&1
echo "optimize rc=$? $(( $(date +%s) - t0 )) s"
RUN=$(ls runs | head -1)
echo "run $RUN"
kw runs
for f in steps sft rl; do
  kw export "$RUN" --format "$f" --out "$OUT/export-$f.jsonl" && echo "export $f: $(wc -l < "$OUT/export-$f.jsonl") records"
done
for g in 0 0.01 0.05; do
  kw export "$RUN" --format steps --min-gain "$g" --out "$OUT/export-gain-$g.jsonl" \
    && echo "export --min-gain $g: $(wc -l < "$OUT/export-gain-$g.jsonl") records"
done
rm -rf "$OUT/handoff" /tmp/onlypytest
python3 -m pip install -q --no-index --no-deps --target /tmp/onlypytest .whl/pytest-[0-9]*.whl .whl/pluggy-*.whl \
  .whl/iniconfig-*.whl .whl/packaging-*.whl .whl/pygments-*.whl >/dev/null 2>&1
kw handoff "$RUN" --out "$OUT/handoff" && ls "$OUT/handoff"
# the handoff's own tests and benchmark, with kernelwright out of reach (only the GPU image's packages)
( cd "$OUT/handoff" && env -u PYTHONPATH PYTHONPATH=/tmp/onlypytest python3 -m pytest -q -p no:cacheprovider . 2>&1 | tail -15 )
echo "handoff pytest rc=$?"
( cd "$OUT/handoff" && env -u PYTHONPATH PYTHONPATH=/tmp/onlypytest python3 bench_*.py 2>&1 | tail -15 )
tar --exclude checkpoints.sqlite -czf "$OUT/runs.tgz" runs
