#!/usr/bin/env bash
# `kernelwright baseline` over lists of KernelBench problem files (one path a line, relative to the repo),
# one process per list, the lists in parallel; problems already in $OUT/<list>.jsonl are skipped, so a
# survey cut short by a call's time limit goes on where it stopped. Run with .whl and .kb carried.
#   bash bench/kb_survey.sh LIST...
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kw-out}
STATE=${STATE:-.kbstate}
mkdir -p "$OUT" "$STATE"
if [ ! -d /tmp/site/kernelwright ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --upgrade --target /tmp/site . >/dev/null 2>&1
fi
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for list in "$@"; do
  name=$(basename "$list" .txt)
  todo=$(python3 - "$list" "$STATE/$name.jsonl" <<'PY'
import json, sys
done = set()
try:
    for line in open(sys.argv[2]):
        try: done.add(json.loads(line)["problem"])
        except Exception: pass
except FileNotFoundError: pass
print(" ".join(p.strip() for p in open(sys.argv[1]) if p.strip() and p.strip() not in done))
PY
)
  if [ -n "$todo" ]; then
    ( timeout ${SURVEY_S:-540} python3 -m kernelwright.cli baseline $todo --device cuda --json >> "$STATE/$name.jsonl" 2>> "$STATE/$name.err" ) &
  fi
done
wait
for list in "$@"; do
  name=$(basename "$list" .txt)
  cp "$STATE/$name.jsonl" "$OUT/$name.jsonl" 2>/dev/null
  echo "== $name: $(wc -l < "$STATE/$name.jsonl" 2>/dev/null || echo 0) of $(grep -c . "$list") done"
done
