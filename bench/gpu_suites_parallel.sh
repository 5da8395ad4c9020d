#!/usr/bin/env bash
# Every GPU test in one device call of under 10 minutes on a two-GPU host (the device tool's nvidia-h100-x2):
# the GPU-lock tests alone (they use both GPUs), then three lanes at once — tests/gpu on GPU 0, the adversarial
# suite on cuda on GPU 1, and the honest suite then the adversarial `-runtime` cases on GPU 1. This is what
# `make test-gpu` runs, split so that it fits; about 6 minutes on two H100s (BENCHMARKS.md, issue 13, fourth
# part). On a one-GPU host the three lanes share GPU 0 and the two-GPU lock tests skip themselves.
# KW_GPUS="2 3" picks the GPUs (the first for tests/gpu, the second, or the first again, for the other lanes) on a
# host whose other GPUs are busy with other work.
# Run after the install line of .ci/gpu-host (PYTHONPATH with kernelwright and its wheels). Logs: $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/kw-out}
mkdir -p "$OUT"
P="python3 -m pytest -q -p no:cacheprovider -rfEs"
t0=$(date +%s)
since() { echo "$(( $(date +%s) - t0 ))s"; }
if [ -n "${KW_GPUS:-}" ]; then
  read -r -a GPUS <<< "$KW_GPUS"
else
  NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
  GPUS=(0); [ "$NGPU" -gt 1 ] && GPUS=(0 1)
fi
G1=${GPUS[0]}; G2=${GPUS[1]:-$G1}
echo "GPUs: ${GPUS[*]} (first lane on GPU $G1, second on GPU $G2)"
CUDA_VISIBLE_DEVICES=$(IFS=,; echo "${GPUS[*]}") $P -m gpu tests/gpu/test_gpu_locks.py > "$OUT/locks.txt" 2>&1
echo "locks rc=$? $(since)"
(CUDA_VISIBLE_DEVICES=$G1 timeout 520 $P -m gpu tests/gpu --ignore=tests/gpu/test_suites_on_gpu.py \
   --ignore=tests/gpu/test_gpu_locks.py > "$OUT/gpu.txt" 2>&1; echo "gpu rc=$? $(since)") &
(CUDA_VISIBLE_DEVICES=$G2 KW_TEST_DEVICE=cuda timeout 520 $P tests/evaluators/test_adversarial.py -k "not runtime" \
   > "$OUT/adv.txt" 2>&1; echo "adversarial rc=$? $(since)") &
(CUDA_VISIBLE_DEVICES=$G2 KW_TEST_DEVICE=cuda timeout 520 $P tests/evaluators/test_honest.py tests/evaluators/test_sandbox_sockets.py \
   tests/evaluators/test_second_look.py > "$OUT/honest.txt" 2>&1; echo "honest rc=$? $(since)";
 CUDA_VISIBLE_DEVICES=$G2 KW_TEST_DEVICE=cuda timeout 400 $P tests/evaluators/test_adversarial.py -k runtime \
   > "$OUT/advrt.txt" 2>&1; echo "adversarial-runtime rc=$? $(since)") &
wait
for f in locks gpu adv honest advrt; do echo "== $f: $(tail -1 "$OUT/$f.txt")"; done
