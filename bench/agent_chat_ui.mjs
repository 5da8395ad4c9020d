// Drive Agent Chat UI (langchain-ai/agent-chat-ui, built from source) in headless Chromium against the graph
// `langgraph dev` serves from langgraph.json, as a person reviewing proposals would: start a run by typing its
// input into the chat box, then approve one proposal, reject one with a written reason and edit one (its `what`)
// from the page. After each decision the run's own trace (`kernelwright trace RUN --json`) must show that the
// decision reached the run: the decision, the reason, the edited field and the child it led to. Screenshots of
// each moment go to SHOTS. Prints one line per check; exits 1 if any check failed.
//
// Started by bench/agent_chat_ui.sh, which starts the servers. Environment:
//   API_URL   the langgraph dev URL              UI_URL     the Agent Chat UI URL (next start)
//   KW        the kernelwright command           RUNS_DIR   the run directories' folder
//   PROBLEM, SEED_KERNEL   absolute paths        SHOTS      folder for the PNG screenshots
//   PUPPETEER_DIR  a folder where puppeteer-core is installed (npm i puppeteer-core)
//   CHROMIUM   the browser (default /usr/bin/chromium)     STEP_TIMEOUT_S  per pause (default 600)

import { execFileSync } from "node:child_process";
import { mkdirSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const env = (name, fallback) => {
  const v = process.env[name] ?? fallback;
  if (v === undefined) {
    console.error(`agent_chat_ui.mjs: set ${name} (see the header of this file)`);
    process.exit(2);
  }
  return v;
};
const API = env("API_URL").replace(/\/$/, "");
const UI = env("UI_URL").replace(/\/$/, "");
const KW = env("KW");
const RUNS_DIR = env("RUNS_DIR");
const SHOTS = env("SHOTS");
const STEP_TIMEOUT_MS = Number(env("STEP_TIMEOUT_S", "600")) * 1000;
const puppeteer = createRequire(path.join(env("PUPPETEER_DIR"), "package.json"))("puppeteer-core");

const INPUT = {
  problem: env("PROBLEM"), seed_kernel: env("SEED_KERNEL"), iterations: 2, device: "cpu",
  review: "proposals", runs_dir: RUNS_DIR,
}; // 2 counted steps: the approved and the edited proposal (a rejected one does not count)
const REASON = "not this knob now: try another one";

const failures = [];
function check(ok, what, detail = "") {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}${detail ? `: ${detail}` : ""}`);
  if (!ok) failures.push(what);
  return ok;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function threadState(tid) {
  const r = await fetch(`${API}/threads/${tid}/state`);
  if (!r.ok) throw new Error(`GET /threads/${tid}/state: ${r.status}`);
  return r.json();
}

/** The thread's pending human-in-the-loop request, or null once the run no longer waits. */
async function waitForPause(tid, notId) {
  const t0 = Date.now();
  while (Date.now() - t0 < STEP_TIMEOUT_MS) {
    const s = await threadState(tid);
    const intr = (s.interrupts ?? []).find((i) => i.id !== notId);
    if (intr) return { interrupt: intr, state: s };
    const busy = (await (await fetch(`${API}/threads/${tid}`)).json()).status === "busy";
    if (!busy && !(s.interrupts ?? []).length) return { interrupt: null, state: s };
    await sleep(2000);
  }
  throw new Error(`no pause within ${STEP_TIMEOUT_MS / 1000} s`);
}

async function startThroughApi() {
  const post = async (url, body) => {
    const r = await fetch(`${API}${url}`, { method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify(body) });
    if (!r.ok) throw new Error(`POST ${url}: ${r.status} ${await r.text()}`);
    return r.json();
  };
  const { thread_id: tid } = await post("/threads", {});
  await post(`/threads/${tid}/runs`, { assistant_id: "optimize", input: INPUT });
  return tid;
}

function traceStep(runId, stepId) {
  const out = execFileSync(KW, ["trace", runId, "--json", "--run-dir", RUNS_DIR], { encoding: "utf8" });
  return out.split("\n").filter(Boolean).map((l) => JSON.parse(l)).find((r) => r.step_id === stepId);
}

async function shot(page, name) {
  const file = path.join(SHOTS, name);
  await page.screenshot({ path: file });
  console.log(`     screenshot ${file} (${Math.round(statSync(file).size / 1024)} KB)`);
}

/** Click a button that decides nothing (a view toggle). */
async function decideLess(page, label) {
  const button = await page.waitForSelector(`xpath/.//button[normalize-space(.)='${label}']`);
  await button.evaluate((el) => el.scrollIntoView({ block: "center" }));
  await button.click();
}

/** Click a button by its label as a person would: scrolled to the middle of the page first, so the chat box
 * (sticky at the bottom) does not cover it. Then the run must leave this pause within 30 s. */
async function decide(page, tid, label, interruptId) {
  const button = await page.waitForSelector(`xpath/.//button[normalize-space(.)='${label}']`);
  await button.evaluate((el) => el.scrollIntoView({ block: "center" }));
  await sleep(300);
  await button.click();
  const t0 = Date.now();
  while (Date.now() - t0 < 30000) {
    const thread = await (await fetch(`${API}/threads/${tid}`)).json();
    const s = await threadState(tid);
    if (thread.status === "busy" || !(s.interrupts ?? []).some((i) => i.id === interruptId)) return true;
    await sleep(1000);
  }
  return check(false, `"${label}" in the page resumed the run`, "the thread still waits on the same pause after 30 s");
}

/** The page shows the pause with this proposal; the live view may have crashed (see the report): then
 * the failure is recorded and the page is reloaded from the thread, as a person would. */
async function pageShowsPause(page, tid, what, label) {
  const shown = () => page.waitForFunction(
    (w) => document.body.innerText.includes("Submit rejection") &&
      [...document.querySelectorAll("textarea")].some((t) => t.value === w),
    { timeout: 30000, polling: 500 }, what);
  try {
    await shown();
    return check(true, `${label}: the page shows the proposal live`, what);
  } catch {
    const crashed = (await page.evaluate(() => document.body.innerText)).includes("Application error");
    check(false, `${label}: the page shows the proposal live`,
      crashed ? "the page crashed (Application error: a client-side exception)" : "not shown within 30 s");
  }
  await page.goto(`${UI}/?apiUrl=${encodeURIComponent(API)}&assistantId=optimize&threadId=${tid}`,
    { waitUntil: "networkidle2" });
  try {
    await shown();
    return check(true, `${label}: the page shows the proposal after a reload`, what);
  } catch {
    const crashed = (await page.evaluate(() => document.body.innerText)).includes("Application error");
    return check(false, `${label}: the page shows the proposal after a reload`,
      crashed ? "the page crashed (Application error: a client-side exception)" : "not shown");
  }
}

/** Scroll the review card's heading to the top, so a screenshot shows the proposal. */
async function showCard(page) {
  const head = await page.waitForSelector("xpath/.//p[normalize-space(.)='Edit/Approve']");
  await head.evaluate((el) => el.scrollIntoView({ block: "start" }));
  await sleep(300);
}

async function setTextarea(handle, text) {
  await handle.click();
  await handle.evaluate((el) => el.select());
  await handle.type(text);
}

async function main() {
  mkdirSync(SHOTS, { recursive: true });
  const browser = await puppeteer.launch({
    executablePath: env("CHROMIUM", "/usr/bin/chromium"), headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  try {
    const page = await browser.newPage();
    await page.setViewport({ width: 1100, height: 820 });
    page.on("pageerror", (e) => console.log(`     page error: ${e.message}`));

    // 1. start a run from the chat box: the input as JSON
    await page.goto(`${UI}/?apiUrl=${encodeURIComponent(API)}&assistantId=optimize`, { waitUntil: "networkidle2" });
    const box = await page.waitForSelector("textarea[placeholder='Type your message...']");
    await box.type(JSON.stringify(INPUT).replace(/,"/g, ', "'));  // spaces, so the chat bubble wraps
    await page.click("button[type=submit]");
    await page.waitForFunction(() => new URL(location.href).searchParams.get("threadId"), { timeout: 30000 });
    let tid = new URL(page.url()).searchParams.get("threadId");
    console.log(`     thread ${tid}`);

    let { interrupt, state } = await waitForPause(tid);
    if (!check(!!interrupt, "the run started from the chat box pauses for a review",
      interrupt ? "" : `values: ${JSON.stringify(state.values).slice(0, 300)}`)) {
      // go on as the README's other way does: a thread started through the API, opened in the page
      tid = await startThroughApi();
      console.log(`     thread ${tid} (started through the API)`);
      await page.goto(`${UI}/?apiUrl=${encodeURIComponent(API)}&assistantId=optimize&threadId=${tid}`,
        { waitUntil: "networkidle2" });
      ({ interrupt, state } = await waitForPause(tid));
      if (!check(!!interrupt, "the run started through the API pauses for a review",
        interrupt ? "" : `values: ${JSON.stringify(state.values).slice(0, 300)}`)) return;
    }
    const runId = state.values.run_id;
    let req = interrupt.value;
    check(!!req.action_requests?.[0]?.args && !!req.review_configs?.[0]?.allowed_decisions?.length,
      "the pause is a human-in-the-loop request (action_requests, review_configs)");
    if (!(await pageShowsPause(page, tid, req.action_requests[0].args.what, "first pause"))) return;
    // the conversation's top: the input typed, the graph's answer, then the review card
    const said = await page.$("xpath/.//p[contains(., 'each proposal pauses here')]");
    if (said) await said.evaluate((el) => el.scrollIntoView({ block: "center" }));
    else await showCard(page);
    await sleep(300);
    await shot(page, "1-proposal.png");

    // 2. approve
    if (!(await decide(page, tid, "Approve", interrupt.id))) return;
    let step = req.step_id;
    ({ interrupt } = await waitForPause(tid, interrupt.id));
    let rec = traceStep(runId, step);
    check(rec?.review?.decision === "approve" && !!rec?.child,
      `approve reached the run (${step})`, `review ${JSON.stringify(rec?.review)}, child ${rec?.child}`);
    if (!interrupt) return check(false, "a second pause follows the approved step");
    req = interrupt.value;
    if (!(await pageShowsPause(page, tid, req.action_requests[0].args.what, "after approve"))) return;
    // the step's description (step id, parent, diagnosis, proposal), one click away in the card's header
    await decideLess(page, "Description");
    const described = await page.waitForFunction((id) => document.body.innerText.includes(`Step ${id} of run`),
      { timeout: 10000 }, req.step_id).then(() => true, () => false);
    check(described, "the page shows the step's description", req.step_id);
    await shot(page, "2-description.png");
    await (await page.waitForSelector("button:has(svg.lucide-x)")).click();
    await page.waitForFunction(() => document.body.innerText.includes("Submit rejection"), { timeout: 10000 });

    // 3. reject with a reason
    const reason = await page.waitForSelector("textarea[placeholder='Share feedback with the agent...']");
    await setTextarea(reason, REASON);
    await reason.evaluate((el) => el.scrollIntoView({ block: "center" }));
    await shot(page, "3-reject-with-reason.png");
    if (!(await decide(page, tid, "Submit rejection", interrupt.id))) return;
    step = req.step_id;
    ({ interrupt } = await waitForPause(tid, interrupt.id));
    rec = traceStep(runId, step);
    check(rec?.review?.decision === "reject" && rec?.review?.message === REASON && !rec?.child,
      `reject with its reason reached the run (${step})`, `review ${JSON.stringify(rec?.review)}, child ${rec?.child}`);
    if (!interrupt) return check(false, "a pause follows the rejected step (a rejection does not count)");
    req = interrupt.value;
    if (!(await pageShowsPause(page, tid, req.action_requests[0].args.what, "after reject"))) return;

    // 4. edit the proposal's `what` to another knob of the seed and submit it
    const original = req.action_requests[0].args;
    const edited = /NUM_WARPS/.test(original.what) ? "NUM_STAGES 2 -> 3" : "NUM_WARPS 8 -> 4";
    const knob = edited.split(" ")[0];
    const value = edited.split(" ").at(-1);
    const what = await page.waitForSelector("xpath/.//p[normalize-space(.)='What']/following-sibling::textarea");
    await setTextarea(what, edited);
    await what.evaluate((el) => el.scrollIntoView({ block: "center" }));
    await shot(page, "4-edit-proposal.png");
    if (!(await decide(page, tid, "Submit", interrupt.id))) return;
    step = req.step_id;
    ({ interrupt } = await waitForPause(tid, interrupt.id));
    rec = traceStep(runId, step);
    check(rec?.review?.decision === "edit" && rec?.proposal?.what === edited &&
      rec?.review?.original_proposal?.what === original.what,
      `edit reached the run (${step})`, `proposal.what ${JSON.stringify(rec?.proposal?.what)}, original ` +
      `${JSON.stringify(rec?.review?.original_proposal?.what)}`);
    const diff = rec?.coder?.diff ?? "";
    check(new RegExp(`^\\+${knob} = ${value}\\b`, "m").test(diff),
      `the edited proposal is what the coder applied (${knob} = ${value})`,
      diff.split("\n").filter((l) => /^[+-][A-Z_]+ = /.test(l)).join(" | ") || `no knob change; coder ${JSON.stringify(rec?.coder)}`);

    // 5. the run ends (2 counted steps) and the page says so
    if (interrupt) check(false, "the run ends after its 2 counted steps", `another pause: ${interrupt.value.step_id}`);
    const end = await threadState(tid);
    check(end.values.status === "finished", "the thread's run finished", `${end.values.status} (${end.values.stop_reason})`);
    await page.goto(`${UI}/?apiUrl=${encodeURIComponent(API)}&assistantId=optimize&threadId=${tid}`,
      { waitUntil: "networkidle2" });
    await sleep(3000);
    await shot(page, "5-finished.png");
  } finally {
    await browser.close();
  }
}

main().then(
  () => {
    console.log(failures.length ? `${failures.length} check(s) failed` : "all checks passed");
    process.exit(failures.length ? 1 : 0);
  },
  (e) => {
    console.error(`agent_chat_ui.mjs: ${e.message}`);
    process.exit(1);
  },
);
