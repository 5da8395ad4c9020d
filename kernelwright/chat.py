"""`kernelwright chat`: a terminal session over a run with proposal reviews.

It drives the run in this process (a new run, or `--attach` to one whose driver is gone), or reviews a
run another process drives (`--attach` while `optimize --review proposals` or the MCP server runs it).
Either way it meets the run at its review desk (files in the run directory), so a chat killed while a
review waits loses nothing: `chat --attach RUN_ID` from a new process finds the same review, the
strategist's proposal unchanged, and the decision is taken once.

Each step is shown as it happens: the review (diagnosis -> proposal) and then the step (diff -> verdict ->
archive decision). Commands are in `HELP`; free text goes to a chat agent when the run has a model, and
gets the command list with the builtin policy.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.markup import escape

from kernelwright import api
from kernelwright.api import UsageError
from kernelwright.tools.review_desk import PendingReview, who

HELP = """commands:
  /approve [STEP]        go on with the proposal (the oldest waiting one unless STEP names another)
  /edit [TEXT]           change the proposal: TEXT replaces its 'what'; without TEXT, $EDITOR opens it as JSON
  /reject REASON         drop the proposal; the reason is recorded and the strategist is told
  /propose TEXT          play the strategist: your own proposal replaces the strategist's
  /kernel FILE           play the coder: FILE is verified as the step's child
  /steer TEXT            a standing note the strategist sees from the next step on
  /pin HASH | /unpin     every branch starts from this kernel | let the archive choose again
  /ban KIND | /unban KIND  no proposal of this kind (tiling, warps, pipelining, reduction, ...)
  /why [STEP]            a step explained: evidence, proposal, review, diff, measurement, decision
  /status  /best         where the run stands | its best kernel
  /auto  /confirm        stop asking (approve every proposal) | start asking again
  /stop                  finish the step in flight, checkpoint, leave (resume: chat --attach RUN_ID)
  /quit                  leave; a run driven here stops as with /stop, one driven elsewhere goes on
  /help                  this list"""


def _clip(text: str, lines: int) -> str:
    rows = text.rstrip().splitlines()
    return "\n".join(rows[:lines] + ([f"… ({len(rows) - lines} more lines)"] if len(rows) > lines else []))


class Chat:
    """One chat session over one run. `handle` is set when this process drives the run."""

    def __init__(self, run_id: str, runs_dir: Path, console: Console, handle: api.RunHandle | None = None,
                 asker: Callable[[str], str] | None = None) -> None:
        self.run_id = run_id
        self.runs_dir = runs_dir
        self.console = console
        self.handle = handle
        self.by = who("chat")
        self.auto = False
        self.done = False
        self.asker = asker
        self.driver: threading.Thread | None = None
        self.driver_error: str | None = None
        self._shown_steps = 0
        self._shown_pending: set[str] = set()
        self._status: str | None = None
        self.notes: list[str] = []
        """what happened since the chat agent last answered (commands typed, steps finished), told to it next"""
        view = api.open_run(run_id, runs_dir)
        self.view = view
        self._shown_steps = len(view.steps())

    # -- the run ------------------------------------------------------------------------------------------

    def start(self) -> None:
        if self.handle is None:
            return

        def drive() -> None:
            assert self.handle is not None
            try:
                self.handle.run_to_end("chat")
            except Exception as e:  # noqa: BLE001 - shown in the session, not a traceback
                self.driver_error = f"{type(e).__name__}: {e}"

        self.driver = threading.Thread(target=drive, name="chat-driver", daemon=True)
        self.driver.start()

    def driving(self) -> bool:
        return self.driver is not None and self.driver.is_alive()

    # -- what happened since the last look ---------------------------------------------------------------

    def poll(self) -> None:
        steps = self.view.steps()
        for s in steps[self._shown_steps:]:
            self.show_step(s)
        self._shown_steps = len(steps)
        waiting = api.pending_reviews(self.run_id, self.runs_dir)
        for p in waiting:
            if p.step_id in self._shown_pending:
                continue
            self._shown_pending.add(p.step_id)
            if self.auto and p.proposal:
                self._decide("approve", step_id=p.step_id, message="approved in /auto mode")
            else:
                self.show_pending(p)
        info = self.view.info()
        if info.status != self._status:
            self._status = info.status
            if info.status not in ("running", "created", "awaiting review"):
                hint = f"; resume: kernelwright chat --attach {info.id}" if info.resumable else ""
                self.say(f"[bold]run {info.id}: {info.status}[/] ({escape(info.stop_reason or '')}){hint}")
        if self.driver_error:
            self.say(f"[red]the run failed: {escape(self.driver_error)}[/]")
            self.driver_error = None

    def say(self, text: str) -> None:
        self.console.print(text, soft_wrap=True, highlight=False)

    def show_pending(self, p: PendingReview) -> None:
        d = p.diagnosis or {}
        self.say(f"\n[bold cyan]── review {p.step_id}[/] parent {escape(p.parent_label or p.parent[:12])}")
        if d:
            self.say(f"  diagnosis: {escape(str(d.get('bottleneck')))}: {escape(str(d.get('summary', '')))}")
        if p.proposal:
            pr = p.proposal
            self.say(f"  proposal ({pr.get('category')}, predicted {pr.get('predicted_speedup')}x): "
                     f"{escape(str(pr.get('what')))}")
            self.say(f"  why: {escape(str(pr.get('why')))}")
            self.say("  → /approve  /edit [TEXT]  /reject REASON  /propose TEXT  /kernel FILE")
        else:
            self.say(f"  no proposal: {escape(p.no_proposal or '')}")
            self.say("  → /propose TEXT  /kernel FILE  /reject REASON (skip the step)")

    def show_step(self, s: api.StepRecord) -> None:
        what = s.proposal.what if s.proposal else "no proposal"
        rev = f" [{s.review.decision} by {s.review.by}]" if s.review else ""
        self.say(f"\n[bold green]── step {s.step_id}[/] {escape(what)}{escape(rev)}")
        self.notes.append(f"step {s.step_id} finished: verdict {s.verdict or '-'}, archive {s.decision.decision}")
        if s.review and s.review.decision == "reject":
            self.say(f"  rejected: {escape(s.review.message or 'no reason given')} (the strategist is told)")
            return
        if s.coder.diff:
            plus = sum(1 for x in s.coder.diff.splitlines() if x.startswith("+") and not x.startswith("+++"))
            minus = sum(1 for x in s.coder.diff.splitlines() if x.startswith("-") and not x.startswith("---"))
            self.say(f"  diff: +{plus} -{minus} lines ({escape(s.coder.policy or '')})")
        elif s.coder.error or s.coder.note:
            self.say(f"  coder: {escape(s.coder.error or s.coder.note or '')}")
        if s.verdict:
            t = s.result.timing if s.result else None
            timing = (f", {t.median_ms:.4f} ms, {t.speedup_vs_eager:.2f}× eager" if t and t.median_ms and
                      t.speedup_vs_eager else "")
            self.say(f"  verdict: {s.verdict} ({s.result.reason if s.result else ''}{timing})")
        self.say(f"  archive: {s.decision.decision}: {escape(s.decision.why)}")

    # -- commands -----------------------------------------------------------------------------------------

    def command(self, line: str) -> None:
        line = line.strip()
        if not line:
            return
        if not line.startswith("/"):
            self.free_text(line)
            return
        self.notes.append(f"the person typed {line}")
        name, _, rest = line[1:].partition(" ")
        rest = rest.strip()
        fn = getattr(self, f"cmd_{name.lower()}", None)
        if fn is None:
            self.say(f"[red]unknown command /{escape(name)}[/] (/help lists them)")
            return
        try:
            fn(rest)
        except UsageError as e:
            self.say(f"[red]{escape(str(e))}[/]")

    def _decide(self, decision: str, step_id: str | None = None, **kw: Any) -> None:
        p = api.review(self.run_id, decision, step_id=step_id, by=self.by, runs_dir=self.runs_dir, **kw)
        self.say(f"[bold]{decision}[/] {p.step_id}" + (f": {escape(kw['message'])}" if kw.get("message") else ""))

    def cmd_help(self, rest: str) -> None:
        self.say(escape(HELP))

    def cmd_approve(self, rest: str) -> None:
        self._decide("approve", step_id=rest or None)

    def cmd_reject(self, rest: str) -> None:
        if not rest:
            raise UsageError("/reject needs a reason: the strategist is told it")
        self._decide("reject", message=rest)

    def cmd_propose(self, rest: str) -> None:
        if not rest:
            raise UsageError("/propose needs the change, in words")
        self._decide("respond", proposal={"what": rest, "why": "the reviewer's proposal"})

    def cmd_kernel(self, rest: str) -> None:
        path = Path(os.path.expanduser(rest))
        if not rest or not path.is_file():
            raise UsageError(f"/kernel needs a file with the child kernel's source{': no file ' + rest if rest else ''}")
        self._decide("respond", kernel=path.read_text(), message=f"kernel from {path}")

    def cmd_edit(self, rest: str) -> None:
        waiting = api.pending_reviews(self.run_id, self.runs_dir)
        if not waiting:
            raise UsageError("no proposal is waiting for a review")
        current = waiting[0].proposal or {}
        if rest:
            self._decide("edit", proposal={**current, "what": rest})
            return
        edited = self.edit_in_editor(current)
        if edited is not None:
            self._decide("edit", proposal=edited)

    def edit_in_editor(self, proposal: dict[str, Any]) -> dict[str, Any] | None:
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
        if not editor:
            raise UsageError("/edit without text needs $EDITOR (or give the new change inline: /edit TEXT)")
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(proposal, f, indent=2)
        try:
            rc = subprocess.call([*shlex.split(editor), f.name])
            text = Path(f.name).read_text()
        finally:
            os.unlink(f.name)
        if rc != 0:
            self.say(f"the editor exited with {rc}: nothing changed")
            return None
        try:
            edited = json.loads(text)
        except ValueError as e:
            raise UsageError(f"the edited proposal is not JSON ({e})") from None
        if edited == proposal:
            self.say("the proposal is unchanged: use /approve to go on with it")
            return None
        return edited

    def cmd_steer(self, rest: str) -> None:
        e = api.steer(self.run_id, "note", rest, by=self.by, runs_dir=self.runs_dir)
        self.say(f"[bold]noted[/] for the strategist from the next step on: {escape(e.text)}")

    def cmd_pin(self, rest: str) -> None:
        e = api.steer(self.run_id, "pin", rest, by=self.by, runs_dir=self.runs_dir)
        self.say(f"[bold]pinned[/] {e.text[:12]}: every branch starts from it from the next generation on")

    def cmd_unpin(self, rest: str) -> None:
        api.steer(self.run_id, "unpin", by=self.by, runs_dir=self.runs_dir)
        self.say("unpinned: the archive chooses the parents again")

    def cmd_ban(self, rest: str) -> None:
        api.steer(self.run_id, "ban", rest, by=self.by, runs_dir=self.runs_dir)
        self.say(f"[bold]banned[/] {escape(rest)} moves from the next step on")

    def cmd_unban(self, rest: str) -> None:
        api.steer(self.run_id, "unban", rest, by=self.by, runs_dir=self.runs_dir)
        self.say(f"unbanned {escape(rest)}")

    def cmd_auto(self, rest: str) -> None:
        self.auto = True
        self.say("[bold]auto[/]: every proposal is approved as it comes (/confirm to be asked again)")
        for p in api.pending_reviews(self.run_id, self.runs_dir):
            if p.proposal:
                self._decide("approve", step_id=p.step_id, message="approved in /auto mode")

    def cmd_confirm(self, rest: str) -> None:
        self.auto = False
        self.say("[bold]confirm[/]: each proposal waits for your decision")

    def cmd_status(self, rest: str) -> None:
        info = self.view.info()
        cfg = api.RunConfig.from_dict(info.config.settings)
        waiting = api.pending_reviews(self.run_id, self.runs_dir)
        st = api.steering(self.run_id, self.runs_dir)
        rejected = sum(1 for s in self.view.steps() if s.decision.reason == "reviewer_rejected")
        budget = cfg.step_budget()
        counted = (f"{info.steps - rejected} of {budget} in the iteration budget" if budget is not None
                   else f"{info.steps - rejected} counted, no step limit ({escape(cfg.budget_words())})")
        self.say(f"run {info.id}: {info.status} — {info.steps} steps, {counted} (rejected proposals do not count), "
                 f"problem {escape(info.problem)}")
        self.say("best: " + (f"{info.best_kernel[:12]} at {info.best_speedup:.3f}× eager" if info.best_speedup
                             else f"{info.best_kernel[:12]} (not timed on this device)" if info.best_kernel
                             else "none (no kernel is verified yet)"))
        self.say("waiting for a review: " + (", ".join(p.step_id for p in waiting) or "nothing"))
        if not st.empty():
            self.say("steering: " + escape(st.render().replace("\n", "; ")))
        self.say("driven " + ("here" if self.driving() else "by another process" if api.driven_elsewhere(
            self.run_id, self.runs_dir) else "by nobody (stopped; chat --attach resumes it)")
            + ("; /auto is on" if self.auto else ""))

    def cmd_best(self, rest: str) -> None:
        b = self.view.best()
        if b is None:
            self.say("no kernel yet")
            return
        t = b.result.timing if b.result else None
        nums = (f"{t.median_ms:.4f} ms, {t.speedup_vs_eager:.3f}× eager, {t.speedup_vs_compile:.3f}× torch.compile"
                if t and t.median_ms and t.speedup_vs_eager and t.speedup_vs_compile else "not timed on this device")
        self.say(f"best kernel {b.hash[:12]}: {escape(str(b.path))} ({nums})")

    def cmd_why(self, rest: str) -> None:
        self.say(escape(explain(self.view, rest or None)))

    def cmd_stop(self, rest: str) -> None:
        if not self.driving() and not api.driven_elsewhere(self.run_id, self.runs_dir):
            info = self.view.info()
            self.say(f"run {info.id} is not running ({info.status}): leaving")
            self.done = True
            return
        api.request_stop(self.run_id, by=self.by, runs_dir=self.runs_dir)
        if self.handle is not None:
            self.handle.request_stop()
        self.say("stopping: the step in flight finishes and is checkpointed…")
        if self.driver is not None:
            self.driver.join()
        info = self.view.info()
        hint = "" if "resume" in (info.stop_reason or "") else f"; resume: kernelwright chat --attach {info.id}"
        self.say(f"run {info.id}: {info.status} ({escape(info.stop_reason or '')}){hint}")
        self.done = True

    def cmd_quit(self, rest: str) -> None:
        if self.driving():
            self.cmd_stop(rest)
        self.done = True

    def free_text(self, text: str) -> None:
        if self.asker is None:
            self.say("this run has no model to talk to (builtin policy); " + escape(HELP))
            return
        since = "; ".join(self.notes[-12:])
        self.notes = []
        self.say("[dim]asking the model…[/]")
        try:
            self.say(escape(self.asker(f"(since you last answered: {since})\n{text}" if since else text)))
        except Exception as e:  # noqa: BLE001 - a provider failure is one sentence
            self.say(f"[red]the chat model failed: {escape(type(e).__name__ + ': ' + str(e))[:300]}[/]")


def explain(view: api.RunView, step: str | None) -> str:
    """A step explained in words: evidence -> proposal -> review -> diff -> measurement -> decision. STEP is
    a step id (g2b0) or number; without it, the latest step."""
    steps = view.steps()
    if not steps:
        return "no step has been recorded yet"
    if step is None:
        s = steps[-1]
    else:
        s = next((x for x in steps if x.step_id == step or str(x.step) == step), None)
        if s is None:
            waiting = [p for p in api.pending_reviews(view.id, view.run.path.parent) if p.step_id == step]
            if waiting:
                return f"step {step} is waiting for your review: its proposal is above (/status lists it)"
            return f"no step {step} in this run (steps: {', '.join(x.step_id for x in steps)})"
    out = [f"step {s.step_id} (#{s.step}, generation {s.generation}, branch {s.branch}), parent {s.parent[:12]}"]
    if s.steering:
        out.append(f"steering in force: notes {s.steering.notes or '-'}, pinned {s.steering.pinned or '-'}, "
                   f"banned {s.steering.banned or '-'}")
    if s.diagnosis:
        out.append(f"evidence: the analyst read the parent as {s.diagnosis.bottleneck}: {s.diagnosis.summary}")
        out += [f"  - {e}" for e in s.diagnosis.evidence[:6]]
    if s.review and s.review.original_proposal:
        o = s.review.original_proposal
        out.append(f"the strategist proposed: {o.get('what')} (predicted {o.get('predicted_speedup')}x)")
    if s.proposal:
        out.append(f"proposal{' (as reviewed)' if s.review else ''}: [{s.proposal.category}] {s.proposal.what} — "
                   f"{s.proposal.why} (predicted {s.proposal.predicted_speedup}x, risk {s.proposal.risk})")
    else:
        out.append("proposal: none")
    if s.review:
        out.append(f"review: {s.review.decision} by {s.review.by} at {s.review.at}"
                   + (f": {s.review.message}" if s.review.message else "")
                   + (" (the reviewer wrote the kernel)" if s.review.kernel_given else ""))
    if s.coder.diff:
        out.append(f"change ({s.coder.policy}):\n" + _clip(s.coder.diff, 40))
    elif s.coder.error or s.coder.note:
        out.append(f"no change: {s.coder.error or s.coder.note}")
    if s.result:
        r = s.result
        out.append(f"verifier: {r.verdict} ({r.reason}){': ' + r.detail[:400] if r.detail else ''}")
        if r.max_rel_error is not None:
            out.append(f"  worst relative error {r.max_rel_error:.2e}")
        t = r.timing
        if t and t.median_ms:
            out.append(f"  measured {t.median_ms:.4f} ms (noise band ±{t.noise_band * 100:.1f}%), "
                       f"{t.speedup_vs_eager or 0:.3f}× eager, {t.speedup_vs_compile or 0:.3f}× torch.compile"
                       + (f"; flagged: {'; '.join(t.suspect)}" if t.suspect else ""))
        elif r.timing_unavailable:
            out.append(f"  not timed: {r.timing_unavailable}")
    d = s.decision
    out.append(f"decision: {d.decision} — {d.why}"
               + (f" (measured {d.measured_speedup:.3f}x" if d.measured_speedup is not None else "")
               + (f", predicted {d.predicted_speedup}x)" if d.measured_speedup is not None and d.predicted_speedup
                  else ")" if d.measured_speedup is not None else ""))
    if s.tokens:
        out.append(f"model use: {s.tokens} tokens, ${s.cost_usd:.4f}")
    return "\n".join(out)


# -- the terminal -----------------------------------------------------------------------------------------


async def _interactive(chat: Chat, history: Path) -> None:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.application import run_in_terminal
    from prompt_toolkit.history import FileHistory
    from prompt_toolkit.patch_stdout import patch_stdout

    history.parent.mkdir(parents=True, exist_ok=True)
    session: PromptSession[str] = PromptSession(history=FileHistory(str(history)))

    async def watch() -> None:
        while not chat.done:
            await asyncio.to_thread(chat.poll)
            await asyncio.sleep(0.3)

    with patch_stdout(raw=True):
        chat.console = Console(file=sys.stdout, force_terminal=True, soft_wrap=True)
        watcher = asyncio.create_task(watch())
        try:
            while not chat.done:
                try:
                    line = await session.prompt_async("kw> ")
                except KeyboardInterrupt:
                    continue
                except EOFError:
                    line = "/quit"
                if line.strip() == "/edit":
                    try:
                        await run_in_terminal(lambda: chat.command(line), in_executor=True)
                    except UsageError as e:
                        chat.say(f"[red]{escape(str(e))}[/]")
                    continue
                await asyncio.to_thread(chat.command, line)
        finally:
            chat.done = True
            watcher.cancel()


def _plain(chat: Chat) -> None:
    """No terminal (a pipe, a script): commands line by line from stdin, events printed as they come."""

    def watch() -> None:
        while not chat.done:
            chat.poll()
            time.sleep(0.3)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    for line in sys.stdin:
        chat.command(line)
        if chat.done:
            break
    else:
        chat.command("/quit")
    chat.done = True
    chat.poll()


def run_chat(*, attach: str | None, runs_dir: Path, console: Console, start: Callable[[], api.RunHandle] | None,
             asker_for: Callable[[api.RunConfig], Callable[[str, Path, str], str] | None] | None = None,
             moves: dict[str, Any] | None = None) -> int:
    """`kernelwright chat`: start a new run (`start`) or attach to `attach`; returns the exit status.
    `moves`: where an attached run that this process resumes evaluates from now on (`api.resume_run`'s
    device, cluster, actors, hosts), as `optimize --resume` takes them."""
    handle: api.RunHandle | None = None
    if attach:
        api.open_run(attach, runs_dir)  # UsageError for an unknown run
        if api.driven_elsewhere(attach, runs_dir):
            console.print(f"run {attach} is driven by another process: reviewing it from here")
        else:
            handle = api.resume_run(attach, runs_dir=runs_dir, **(moves or {}))
            if handle.config.review == "none":
                console.print(f"run {attach} was started without reviews: it goes on unattended (/status, /why and "
                              "/steer still work)")
        run_id = attach
    else:
        assert start is not None
        handle = start()
        run_id = handle.id
    info = api.open_run(run_id, runs_dir).info()
    cfg = api.RunConfig.from_dict(info.config.settings)
    console.print(f"[bold]kernelwright chat[/] — run {run_id} on {escape(info.problem)} ({cfg.device}, "
                  f"{cfg.model}); /help lists the commands")
    ask = asker_for(cfg) if asker_for else None
    chat = Chat(run_id, runs_dir, console, handle, (lambda text: ask(run_id, runs_dir, text)) if ask else None)
    chat.start()
    try:
        if sys.stdin.isatty() and sys.stdout.isatty():
            asyncio.run(_interactive(chat, Path(os.path.expanduser("~/.kernelwright/chat_history"))))
        else:
            _plain(chat)
    finally:
        if chat.driving():
            chat.cmd_stop("")
        if handle is not None:
            handle.close()
    return 0


def asker_for(config: api.RunConfig) -> Callable[[str, Path, str], str] | None:
    """Free text's answerer for a run: the strategist's model with read tools and the chat's actions over the
    run (None for the builtin policy, whose chat answers free text with the command list)."""
    spec = config.model_for("strategist")
    if spec == "builtin":
        return None
    return api.chat_asker(spec, config)
