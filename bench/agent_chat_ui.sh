#!/usr/bin/env bash
# Agent Chat UI in a real browser: serve langgraph.json with `langgraph dev --no-reload` (CPU, builtin policy,
# review of proposals), serve a built Agent Chat UI pointed at it, and drive the page in headless Chromium
# (bench/agent_chat_ui.mjs): start a run from the chat box, approve one proposal, reject one with a reason,
# edit one; each decision is checked in the run's trace. Exits non-zero if any check fails; stops what it started.
#
#   ACUI_DIR=/path/to/agent-chat-ui PUPPETEER_DIR=/path/with/puppeteer-core bash bench/agent_chat_ui.sh
#
# Build the UI once, outside this repository (node 20 and pnpm, as its README says):
#   git clone https://github.com/langchain-ai/agent-chat-ui && cd agent-chat-ui && npx pnpm install && npx pnpm build
#   (offline, where next/font cannot reach Google Fonts: `bash bench/agent_chat_ui.sh offline-font DIR` first
#   makes src/app/layout.tsx load Inter from the @fontsource/inter package instead)
# and the driver's one package, also outside: mkdir /some/dir && cd /some/dir && npm i puppeteer-core
#
# Environment: ACUI_DIR (the built UI), PUPPETEER_DIR, CHROMIUM (default /usr/bin/chromium), LANGGRAPH (the
# langgraph command, default `langgraph` from PATH or .venv: pip install "langgraph-cli[inmem]"), KW (the
# kernelwright command), GRAPH_CONFIG (default langgraph.json here), SHOTS (default docs/img/agent-chat-ui),
# PROBLEM / SEED_KERNEL (default examples/softmax), ACUI_COMMIT (printed), KEEP=1 keeps the temporary folder (logs, runs).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

if [[ "${1:-}" == offline-font ]]; then
  dir="${2:?give the agent-chat-ui folder}"
  (cd "$dir" && npx -y pnpm add @fontsource/inter)
  python3 - "$dir/src/app/layout.tsx" <<'EOF'
import re, sys
p = sys.argv[1]
s = open(p).read()
src = "".join(f'    {{ path: "../../node_modules/@fontsource/inter/files/inter-latin-{w}-normal.woff2", weight: "{w}" }},\n'
              for w in (400, 500, 600, 700))
s = s.replace('import { Inter } from "next/font/google";', 'import localFont from "next/font/local";')
s = re.sub(r"const inter = Inter\(\{.*?\}\);", "const inter = localFont({\n  src: [\n" + src + '  ],\n  display: "swap",\n});',
           s, flags=re.S)
open(p, "w").write(s)
EOF
  echo "patched $dir/src/app/layout.tsx; now: cd $dir && npx pnpm build"
  exit 0
fi

: "${ACUI_DIR:?set ACUI_DIR to the built agent-chat-ui folder (see the header of this script)}"
: "${PUPPETEER_DIR:?set PUPPETEER_DIR to a folder where puppeteer-core is installed (npm i puppeteer-core)}"
[[ -d "$ACUI_DIR/.next" ]] || { echo "no build in $ACUI_DIR (.next missing): run 'npx pnpm build' there" >&2; exit 2; }
CONFIG="$(cd "$(dirname "${GRAPH_CONFIG:-$ROOT/langgraph.json}")" && pwd)/$(basename "${GRAPH_CONFIG:-langgraph.json}")"
if [[ -z "${LANGGRAPH:-}" ]]; then
  LANGGRAPH="$(command -v langgraph || echo "$ROOT/.venv/bin/langgraph")"
fi
KW="${KW:-$(command -v kernelwright || echo "$ROOT/.venv/bin/kernelwright")}"
SHOTS="${SHOTS:-$ROOT/docs/img/agent-chat-ui}"

TMP="$(mktemp -d /tmp/kw-agent-chat-ui.XXXXXX)"
touch "$TMP/langgraph.log" "$TMP/ui.log"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -- "-$pid" 2>/dev/null || true; done  # each started in its own group
  sleep 1
  for pid in "${pids[@]}"; do kill -9 -- "-$pid" 2>/dev/null || true; done
  if [[ "${KEEP:-0}" == 1 ]]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# langgraph dev: moves to another port when its own is taken, so the URL is read from what it prints
(cd "$(dirname "$CONFIG")" && KERNELWRIGHT_LANGGRAPH_DB="$TMP/langgraph.sqlite" \
  exec setsid $LANGGRAPH dev --no-reload --no-browser --config "$CONFIG" --port "$(free_port)" >"$TMP/langgraph.log" 2>&1) &
pids+=($!)
API_URL=""
for _ in $(seq 120); do
  API_URL="$(sed -n 's/\x1b\[[0-9;]*m//g; s/.*API: *\(http[^ ]*\).*/\1/p' "$TMP/langgraph.log" | head -1 || true)"
  [[ -n "$API_URL" ]] && curl -sf "$API_URL/ok" >/dev/null 2>&1 && break
  kill -0 "${pids[0]}" 2>/dev/null || { echo "langgraph dev stopped:" >&2; tail -20 "$TMP/langgraph.log" >&2; exit 1; }
  sleep 1
done
curl -sf "$API_URL/ok" >/dev/null || { echo "langgraph dev did not answer in 120 s (log: $TMP/langgraph.log)" >&2; KEEP=1; exit 1; }
echo "langgraph dev: $API_URL"

# Agent Chat UI: NEXT_PUBLIC_* are read at build time by `next build`; the driver also gives both in the URL
UI_PORT="$(free_port)"
(cd "$ACUI_DIR" && NEXT_PUBLIC_API_URL="$API_URL" NEXT_PUBLIC_ASSISTANT_ID=optimize NEXT_TELEMETRY_DISABLED=1 \
  exec setsid npx next start -p "$UI_PORT" -H 127.0.0.1 >"$TMP/ui.log" 2>&1) &
pids+=($!)
UI_URL="http://127.0.0.1:$UI_PORT"
for _ in $(seq 60); do curl -sf -o /dev/null "$UI_URL/" && break; sleep 1; done
curl -sf -o /dev/null "$UI_URL/" || { echo "Agent Chat UI did not answer in 60 s (log: $TMP/ui.log)" >&2; KEEP=1; exit 1; }
echo "Agent Chat UI: $UI_URL (${ACUI_COMMIT:-$(cd "$ACUI_DIR" && git rev-parse --short HEAD 2>/dev/null || echo "commit unknown: set ACUI_COMMIT")})"

rc=0
API_URL="$API_URL" UI_URL="$UI_URL" KW="$KW" RUNS_DIR="$TMP/runs" SHOTS="$SHOTS" PUPPETEER_DIR="$PUPPETEER_DIR" \
  PROBLEM="${PROBLEM:-$ROOT/examples/softmax/problem.py}" SEED_KERNEL="${SEED_KERNEL:-$ROOT/examples/softmax/seed.py}" \
  node "$ROOT/bench/agent_chat_ui.mjs" || rc=$?
[[ $rc == 0 ]] || { KEEP=1; echo "logs: $TMP/langgraph.log, $TMP/ui.log" >&2; }
exit $rc
