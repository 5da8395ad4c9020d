"""`kernelwright report`: a run as one self-contained HTML file.

The page opens from disk with no network: its styles and its one small script are inline, its charts are
inline SVG, and a Content-Security-Policy forbids loading anything (no CDN, no module scripts, no fonts).
Every text that came from a candidate, a model or a person is escaped. Without script the page shows
everything; the script only adds the filters (verdict, archive decision, kind of move, role).

What it shows, read from the run directory (so a run in progress is reported as far as it has got):
the header (problem, device, precision contract, budgets, eager / torch.compile / floor, seed and best),
the speedup over steps, the lineage tree with the best path marked and failed proposals shown, and one
card per step: evidence -> diagnosis -> proposal -> review -> side-by-side diff -> verdict and time with its
noise band (for a structural change, with the builtin's sweep of its knobs) -> archive decision -> tokens, cost,
reasoning and transcripts.
"""

from __future__ import annotations

import html
import json
import os
import re
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelwright.agents.records import StepRecord
from kernelwright.agents.tuning import TuneRecord
from kernelwright.api import read_steps
from kernelwright.evaluators import EvalResult
from kernelwright.evaluators.result import run_secrets, scrub
from kernelwright.tools.review_desk import ReviewDesk
from kernelwright.tools.runstore import Run, RunInfo, atomic_write, lineage

ROLES = ("analyst", "strategist", "reviewer", "coder", "verifier", "archive")
PROMPT_CHARS = 20_000
"""the most of a role's prompt shown inline (the transcript link has all of it)"""
PAGE_PROMPT_CHARS = 8_000_000
"""the most prompt text one page carries inline, all steps together; past it, steps link their transcripts only
(a long model-driven run would otherwise make a page of hundreds of MB)"""


def esc(text: Any) -> str:
    """Escaped for HTML, with the run's secrets and strings shaped like an API key redacted (a model may have
    echoed a key into a transcript, a kernel or its reasoning)."""
    return html.escape(scrub("" if text is None else str(text), _SECRETS.get()), quote=True)


# -- what the report is made of --------------------------------------------------------------------------


@dataclass
class Node:
    """A kernel in the lineage tree, or a proposal that made none (`failed`)."""

    key: str
    generation: int
    parent: str | None
    step_id: str | None
    label: str
    speedup: float | None = None
    failed: bool = False
    title: str = ""
    children: list[str] = field(default_factory=list)
    y: float = 0.0


@dataclass
class RunData:
    run: Run
    info: RunInfo
    steps: list[StepRecord]
    evals: dict[str, EvalResult]
    devices: list[dict[str, Any]]
    waiting: list[Any]
    prompt_chars: int = 0
    """prompt text put inline so far (see PAGE_PROMPT_CHARS)"""

    @property
    def config(self) -> dict[str, Any]:
        return self.info.config.settings

    @property
    def seed(self) -> str | None:
        return self.info.config.seed_kernel

    def timing(self, h: str | None) -> Any:
        r = self.evals.get(h) if h else None
        return r.timing if r else None

    def best_path(self) -> list[str]:
        """Kernels from the seed to the best, by the steps that made them (`tools.runstore.lineage`)."""
        best = self.info.best_kernel
        if not best:
            return []
        chain = lineage(self.steps, best)
        return [chain[0].parent, *(s.child for s in chain)] if chain else [best]


def load(run: Run) -> RunData:
    """Everything the report reads from the run directory. UsageError: a trace this version cannot read."""
    info = run.info()
    steps = read_steps(run)
    evals: dict[str, EvalResult] = {}
    for h in {info.config.seed_kernel, info.best_kernel, *(s.child for s in steps), *(s.parent for s in steps)}:
        data = run.eval(h) if h else None
        if data is not None:
            try:
                evals[h] = EvalResult.model_validate(data)  # type: ignore[index]
            except ValueError:
                continue
    devices = []
    for p in sorted((run.path / "devices").glob("*.json")) if (run.path / "devices").is_dir() else []:
        try:
            devices.append(json.loads(p.read_text()))
        except (OSError, ValueError):
            continue
    try:
        waiting = ReviewDesk(run).waiting()
    except (OSError, ValueError):
        waiting = []
    return RunData(run=run, info=info, steps=steps, evals=evals, devices=devices, waiting=waiting)


# -- formatting ------------------------------------------------------------------------------------------


def ms(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v * 1000:.1f} µs" if v < 0.1 else f"{v:.3f} ms" if v < 100 else f"{v:.0f} ms"


def x(v: float | None, digits: int = 2) -> str:
    return "–" if v is None else f"{v:.{digits}f}×"


def pct(v: float | None) -> str:
    return "–" if v is None else f"{v * 100:.0f} %"


def badge(text: str, kind: str) -> str:
    return f'<span class="badge b-{esc(kind)}">{esc(text)}</span>'


def kv(rows: list[tuple[str, str]]) -> str:
    """A two-column table; values are HTML already."""
    return '<table class="kv">' + "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


# -- the header ------------------------------------------------------------------------------------------


def _count(n: object, word: str) -> str:
    """'1 branch', '2 branches': a count with its noun in the right number."""
    plural = word + ("es" if word.endswith(("ch", "sh", "s", "x")) else "s")
    return f"{n} {word if n == 1 else plural}"


def header(d: RunData) -> str:
    info, cfg = d.info, d.config
    seed_t, best_t = d.timing(d.seed), d.timing(info.best_kernel)
    ref = best_t or seed_t
    ended = info.status in ("finished", "stopped", "failed", "interrupted")
    status = badge(info.status, "ok" if info.status in ("finished", "stopped") else "bad" if info.status == "failed" else "live")
    any_eval = d.evals.get(info.best_kernel or "") or d.evals.get(d.seed or "") or next(iter(d.evals.values()), None)

    dev = d.devices[0] if d.devices else None
    device = esc(cfg.get("device") or (any_eval.device if any_eval else "?"))
    if dev:
        bits = [dev.get("name")]
        if dev.get("sms"):
            bits.append(f"{dev['sms']} SMs")
        if dev.get("l2_bytes"):
            bits.append(f"{dev['l2_bytes'] / 2**20:.0f} MiB L2")
        if dev.get("memory_bytes"):
            bits.append(f"{dev['memory_bytes'] / 2**30:.0f} GiB")
        device += f" — {esc(', '.join(str(b) for b in bits if b))}"
    if any_eval and any_eval.versions:
        device += " · " + esc(", ".join(f"{k} {v}" for k, v in sorted(any_eval.versions.items())))

    if any_eval:
        contract = (f"{esc(any_eval.precision)}; per-element |out − ref| / (|ref| + rms(ref)) ≤ "
                    f"{esc(any_eval.tolerance)} against a {esc(any_eval.gold_precision or 'float64')} reference, "
                    f"input families {esc(', '.join(any_eval.families) or '–')}")
    else:
        contract = esc(cfg.get("precision") or "fp32") + " (no kernel judged yet)"

    from kernelwright.agents.context import RunConfig  # the step budget as the run applies it (8 with no budget)

    its, branches = RunConfig.from_dict(cfg).step_budget(), cfg.get("branches")
    budgets = [_count(its, "iteration") if its is not None else "no step limit", _count(branches, "branch")]
    if cfg.get("time_budget_s"):
        budgets.append(f"{cfg['time_budget_s']:.0f} s")
    if cfg.get("token_budget"):
        budgets.append(f"{cfg['token_budget']} tokens")
    if cfg.get("cost_budget_usd"):
        budgets.append(f"${cfg['cost_budget_usd']}")
    models = cfg.get("model") or "builtin"
    if cfg.get("role_models"):
        models += " (" + ", ".join(f"{k}={v}" for k, v in cfg["role_models"].items()) + ")"

    if ref:
        comp = (f"{ms(ref.compile_ms)} ({esc(ref.compile_mode)})" if ref.compile_ms is not None
                else f"unavailable: {esc(ref.compile_unavailable)}")
        floor = (f"{ms(ref.floor_ms)} ({esc(ref.bound)}-bound)" if ref.floor_ms is not None
                 else f"unavailable: {esc(ref.floor_unavailable)}")
        baselines = f"eager {ms(ref.eager_ms)} · torch.compile {comp} · floor {floor}"
    else:
        why = next((r.timing_unavailable for r in d.evals.values() if r.timing_unavailable), None)
        baselines = "not timed" + (f": {esc(why)}" if why else "")

    def kernel_line(h: str | None) -> str:
        if not h:
            return "–"
        t = d.timing(h)
        link = f'<a href="#n-{esc(h)}"><code>{esc(h)}</code></a>'
        if t is None:
            r = d.evals.get(h)
            return f"{link} — {esc(r.verdict + ' (' + r.reason + '), not timed') if r else 'not judged yet'}"
        return (f"{link} — {ms(t.median_ms)} (p25–p75 {ms(t.p25_ms)}–{ms(t.p75_ms)}), {x(t.speedup_vs_eager)} eager, "
                f"{x(t.speedup_vs_compile)} torch.compile, {pct(t.fraction_of_floor)} of the floor")

    rows = [
        ("problem", f"<code>{esc(info.problem)}</code>"),
        ("status", f"{status} {esc(info.stop_reason or ('' if ended else 'in progress: this page shows the steps recorded so far'))}"),
        ("device", device),
        ("precision contract", contract),
        ("budgets", esc(", ".join(budgets))),
        ("policy", esc(models) + (f" · review: {esc(cfg.get('review'))}" if cfg.get("review") not in (None, "none") else "")),
        ("baselines", baselines),
        ("seed", kernel_line(d.seed)),
        ("best", kernel_line(info.best_kernel)),
        ("steps", f"{len(d.steps)} recorded · {info.tokens:,} tokens · ${info.cost_usd:.4f}"),
        ("times", f"started {esc(info.created)} · updated {esc(info.updated)} · report made {esc(time.strftime('%Y-%m-%dT%H:%M:%S'))}"),
    ]
    out = [f"<h1>kernelwright run <code>{esc(info.id)}</code></h1>", kv(rows)]
    if d.waiting:
        out.append('<p class="waiting">Waiting for a review: ' + ", ".join(
            f"<b>{esc(p.step_id)}</b> ({esc((p.proposal or {}).get('what', 'no proposal'))})" for p in d.waiting)
            + " — <code>kernelwright chat --attach " + esc(info.id) + "</code></p>")
    return "\n".join(out)


# -- speedup over steps ----------------------------------------------------------------------------------

DECISION_COLOURS = {"elite": "#1a7f37", "niche": "#8250df", "unmeasured": "#9a6700", "rejected": "#cf222e"}


def speedup_chart(d: RunData) -> str:
    seed_t = d.timing(d.seed)
    points = [(i + 1, s, d.timing(s.child)) for i, s in enumerate(d.steps)]
    timed = [(i, s, t) for i, s, t in points if t is not None]
    if seed_t is None and not timed:
        return ('<p class="muted">No kernel of this run was timed (on the CPU, Triton\'s interpreter checks '
                'correctness only), so there is no speedup to plot.</p>')
    best = seed_t.speedup_vs_eager if seed_t else 0.0
    line = [(0, best)]
    for i, s, t in timed:
        if s.decision.decision == "elite" and t.speedup_vs_eager > best:
            best = t.speedup_vs_eager
        line.append((i, best))
    line.append((len(d.steps), best))
    ref = seed_t or timed[0][2]
    marks = []
    if ref.speedup_vs_compile is not None and ref.compile_ms:
        marks.append(("torch.compile", ref.eager_ms / ref.compile_ms, "#0969da"))
    if ref.floor_ms:
        marks.append(("floor", ref.eager_ms / ref.floor_ms, "#57606a"))
    ys = [v for _, v in line] + [t.speedup_vs_eager for _, _, t in timed] + [v for _, v, _ in marks]
    top = max(ys) * 1.08 or 1.0
    w, h, l, r, t_, b = 900, 300, 60, 130, 14, 36
    n = max(len(d.steps), 1)

    def px(i: float) -> float:
        return l + (w - l - r) * i / n

    def py(v: float) -> float:
        return t_ + (h - t_ - b) * (1 - v / top)

    svg = [f'<svg class="chart" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
           f'aria-label="speedup over eager, per step">']
    for k in range(6):
        v = top * k / 5
        svg.append(f'<line x1="{l}" x2="{w - r}" y1="{py(v):.1f}" y2="{py(v):.1f}" class="grid"/>'
                   f'<text x="{l - 6}" y="{py(v) + 4:.1f}" text-anchor="end">{v:.1f}×</text>')
    step_ticks = sorted({0, n, *range(0, n + 1, max(1, n // 10))})
    for i in step_ticks:
        svg.append(f'<text x="{px(i):.1f}" y="{h - b + 16}" text-anchor="middle">{i}</text>')
    svg.append(f'<text x="{(l + w - r) / 2}" y="{h - 4}" text-anchor="middle">step</text>')
    for name, v, colour in marks:
        svg.append(f'<line x1="{l}" x2="{w - r}" y1="{py(v):.1f}" y2="{py(v):.1f}" stroke="{colour}" '
                   f'stroke-dasharray="5 4"/><text x="{w - r + 6}" y="{py(v) + 4:.1f}" fill="{colour}">'
                   f'{esc(name)} {v:.2f}×</text>')
    pts = " ".join(f"{px(i):.1f},{py(v):.1f}" for i, v in line)
    svg.append(f'<polyline points="{pts}" class="best" fill="none"/>')
    svg.append(f'<text x="{w - r + 6}" y="{py(best) + 4:.1f}" class="bestlabel">best {best:.2f}×</text>')
    for i, s, tm in timed:
        c = DECISION_COLOURS.get(s.decision.decision, "#57606a")
        svg.append(f'<a href="#{esc(s.step_id)}"><circle cx="{px(i):.1f}" cy="{py(tm.speedup_vs_eager):.1f}" r="4" '
                   f'fill="{c}"><title>{esc(s.step_id)}: {tm.speedup_vs_eager:.3f}× eager, {esc(s.decision.decision)}'
                   f'</title></circle></a>')
    svg.append("</svg>")
    legend = " ".join(f'<span class="dot" style="background:{c}"></span>{esc(k)}' for k, c in DECISION_COLOURS.items())
    return ("".join(svg) + f'<p class="legend">each dot a timed child, by the archive\'s decision: {legend}; '
            'the line is the best kernel so far (speedup over eager)</p>')


# -- the lineage tree ------------------------------------------------------------------------------------


def lineage_tree(d: RunData) -> dict[str, Node]:
    nodes: dict[str, Node] = {}
    if d.seed:
        st = d.timing(d.seed)
        nodes[d.seed] = Node(d.seed, 0, None, None, f"seed {d.seed[:6]}", st.speedup_vs_eager if st else None,
                             title="the seed")
    for s in d.steps:
        if s.parent not in nodes:  # a parent the trace never showed being made (e.g. a pinned kernel)
            nodes[s.parent] = Node(s.parent, max(s.generation - 1, 0), None, None, s.parent[:6])
        what = s.proposal.what if s.proposal else "no proposal"
        if s.child and s.verdict == "pass":
            if s.child in nodes:  # the same source made again: one node, the first step keeps it
                continue
            t = d.timing(s.child)
            nodes[s.child] = Node(s.child, s.generation, s.parent, s.step_id, s.child[:6],
                                  t.speedup_vs_eager if t else None, title=f"{s.step_id}: {what}"
                                  + (f", then tuned: {s.tuning.chose}" if s.tuning and s.tuning.chose else ""))
        else:
            why = (s.result.reason if s.result else s.coder.error or s.coder.note or s.decision.why)
            nodes[f"x-{s.step_id}"] = Node(f"x-{s.step_id}", s.generation, s.parent, s.step_id, s.step_id,
                                            failed=True, title=f"{s.step_id}: {what} — {why}")
        nodes[s.parent].children.append(s.child if s.child in nodes and s.verdict == "pass" else f"x-{s.step_id}")
    return nodes


def lineage_svg(d: RunData, best: set[str]) -> str:
    """The lineage tree; `best`: the kernels on the path from the seed to the best."""
    nodes = lineage_tree(d)
    if not nodes:
        return '<p class="muted">No kernel yet.</p>'
    # rows: a depth-first walk from the roots, so a kernel's descendants sit below it
    order: list[str] = []
    seen: set[str] = set()

    def walk(k: str) -> None:
        if k in seen:
            return
        seen.add(k)
        order.append(k)
        for c in sorted(nodes[k].children, key=lambda c: c not in best):  # the best path runs along the top
            walk(c)

    for k, n in nodes.items():
        if n.parent is None:
            walk(k)
    for k in nodes:
        walk(k)
    dx, dy, pad = 120, 26, 16
    for row, k in enumerate(order):
        nodes[k].y = pad + row * dy
    gens = max(n.generation for n in nodes.values())
    w, h = pad * 2 + (gens + 1) * dx + 40, pad * 2 + len(order) * dy

    def cx(n: Node) -> float:
        return pad + 10 + n.generation * dx

    svg = [f'<svg class="tree" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="lineage">']
    for n in nodes.values():
        if n.parent and n.parent in nodes:
            p = nodes[n.parent]
            on_best = n.key in best and p.key in best
            cls = "edge best" if on_best else "edge failed" if n.failed else "edge"
            mid = (cx(p) + cx(n)) / 2
            svg.append(f'<path class="{cls}" d="M{cx(p):.0f},{p.y:.0f} C{mid:.0f},{p.y:.0f} {mid:.0f},{n.y:.0f} '
                       f'{cx(n):.0f},{n.y:.0f}"/>')
    for n in nodes.values():
        target = f"#{n.step_id}" if n.step_id else f"#k-{n.key}"
        if n.failed:
            shape = (f'<rect x="{cx(n) - 5:.0f}" y="{n.y - 5:.0f}" width="10" height="10" class="node failed"/>'
                     f'<text x="{cx(n) + 9:.0f}" y="{n.y + 4:.0f}" class="failed">{esc(n.label)} ✗</text>')
        else:
            cls = "node best" if n.key in best else "node"
            sp = f" {n.speedup:.2f}×" if n.speedup is not None else ""
            shape = (f'<circle cx="{cx(n):.0f}" cy="{n.y:.0f}" r="6" class="{cls}"/>'
                     f'<text x="{cx(n) + 10:.0f}" y="{n.y + 4:.0f}"{" class=bestlabel" if n.key in best else ""}>'
                     f'{esc(n.label)}{esc(sp)}</text>')
        svg.append(f'<a href="{esc(target)}" id="n-{esc(n.key)}"><title>{esc(n.key)} {esc(n.title)}</title>{shape}</a>')
    for g in range(gens + 1):
        svg.append(f'<text x="{pad + 10 + g * dx}" y="{h - 2}" class="muted" text-anchor="middle">gen {g}</text>')
    svg.append("</svg>")
    return ('<div class="treebox">' + "".join(svg) + '</div><p class="legend">columns are generations; '
            '<b class="bestlabel">green</b>: the path from the seed to the best kernel; '
            '<span class="failed">red squares</span>: proposals that made no verified child; '
            'a node links to the step that made it</p>')


# -- the diff --------------------------------------------------------------------------------------------

HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")


def side_by_side(diff: str) -> str:
    """A unified diff as two columns, old on the left, new on the right."""
    rows: list[str] = []
    old_no = new_no = 0
    minus: list[tuple[int, str]] = []
    plus: list[tuple[int, str]] = []

    def flush() -> None:
        for i in range(max(len(minus), len(plus))):
            a = minus[i] if i < len(minus) else None
            b = plus[i] if i < len(plus) else None
            rows.append("<tr>" + (f'<td class="ln">{a[0]}</td><td class="del">{esc(a[1])}</td>' if a else
                                  '<td class="ln"></td><td class="empty"></td>') +
                        (f'<td class="ln">{b[0]}</td><td class="add">{esc(b[1])}</td>' if b else
                         '<td class="ln"></td><td class="empty"></td>') + "</tr>")
        minus.clear()
        plus.clear()

    for line in diff.splitlines():
        if line.startswith(("--- ", "+++ ")):
            continue
        m = HUNK.match(line)
        if m:
            flush()
            old_no, new_no = int(m.group(1)), int(m.group(2))
            rows.append(f'<tr class="hunk"><td colspan="4">{esc(line)}</td></tr>')
        elif line.startswith("-"):
            minus.append((old_no, line[1:]))
            old_no += 1
        elif line.startswith("+"):
            plus.append((new_no, line[1:]))
            new_no += 1
        else:
            flush()
            text = line[1:] if line.startswith(" ") else line
            rows.append(f'<tr><td class="ln">{old_no}</td><td>{esc(text)}</td>'
                        f'<td class="ln">{new_no}</td><td>{esc(text)}</td></tr>')
            old_no += 1
            new_no += 1
    flush()
    return '<table class="diff"><colgroup><col class="ln"><col><col class="ln"><col></colgroup>' + "".join(rows) + "</table>"


# -- a step's card ---------------------------------------------------------------------------------------


def _transcript(d: RunData, rel: str, out_dir: Path) -> tuple[str, str]:
    """(a link to the transcript, the role's first prompt, bounded)."""
    href = os.path.relpath(d.run.path / rel, out_dir)
    prompt = d.run.transcript_prompt(rel) or ""
    if len(prompt) > PROMPT_CHARS:
        prompt = prompt[:PROMPT_CHARS] + f"\n… ({len(prompt) - PROMPT_CHARS} more characters in the transcript)"
    if d.prompt_chars + len(prompt) > PAGE_PROMPT_CHARS:
        prompt = "" if not prompt else "(not inline: this page already carries its share of prompts; see the transcript)"
    d.prompt_chars += len(prompt)
    return f'<a href="{esc(href)}">{esc(rel)}</a>', prompt


def card(d: RunData, i: int, s: StepRecord, best: set[str], out_dir: Path) -> str:
    child_eval = d.evals.get(s.child) if s.child else None
    t = child_eval.timing if child_eval else None
    dec = s.decision
    verdict = s.verdict or "none"
    category = s.proposal.category if s.proposal else "none"
    on_best = bool(s.child and s.child in best and s.verdict == "pass")
    head = (f'<h3><a href="#{esc(s.step_id)}">step {i + 1}</a> · {esc(s.step_id)} '
            f'<span class="muted">generation {s.generation}, branch {s.branch}</span> '
            f'{badge(verdict, "ok" if verdict == "pass" else "bad")} {badge(dec.decision, dec.decision)}'
            f'{badge("best path", "best") if on_best else ""}</h3>'
            f'<p class="muted">parent <a href="#n-{esc(s.parent)}"><code>{esc(s.parent)}</code></a> → child '
            + (f'<a href="#n-{esc(s.child)}"><code>{esc(s.child)}</code></a>' if s.child else "none") + f' · {esc(s.time)}</p>')
    parts = [head]

    def section(role: str, title: str, body: str) -> None:
        parts.append(f'<div class="sec role-{role}"><h4>{esc(title)}</h4>{body}</div>')

    # evidence and diagnosis (analyst)
    body = ""
    if s.diagnosis:
        dg = s.diagnosis
        if dg.evidence:
            body += "<ul>" + "".join(f"<li>{esc(e)}</li>" for e in dg.evidence) + "</ul>"
        body += (f"<p><b>{esc(dg.bottleneck)}</b>: {esc(dg.summary)}"
                 + (f" <span class='muted'>(headroom {pct(dg.headroom)})</span>" if dg.headroom is not None else "")
                 + "</p>")
    else:
        body += '<p class="muted">no diagnosis recorded</p>'
    section("analyst", "evidence → diagnosis (analyst)", body + _role_usage(d, s, "analyst", out_dir))

    # proposal (strategist)
    if s.proposal:
        p = s.proposal
        body = (f"<p><b>{esc(p.what)}</b> <span class='badge b-kind'>{esc(p.category)}</span> "
                f"predicted {x(p.predicted_speedup)} · risk {esc(p.risk)}</p><p>{esc(p.why)}</p>")
    else:
        body = '<p class="muted">no proposal (nothing left to propose, or the model failed)</p>'
    if s.steering and (s.steering.notes or s.steering.pinned or s.steering.banned):
        st = s.steering
        body += ('<p class="muted">steering in force: ' + esc("; ".join(
            [*(f"note: {n}" for n in st.notes), *([f"pinned {st.pinned}"] if st.pinned else []),
             *([f"banned {', '.join(st.banned)}"] if st.banned else [])])) + "</p>")
    section("strategist", "proposal (strategist)", body + _role_usage(d, s, "strategist", out_dir))

    # review (a person)
    if s.review:
        rv = s.review
        body = (f"<p>{badge(rv.decision, 'kind')} by <b>{esc(rv.by)}</b> at {esc(rv.at)}"
                + (f": {esc(rv.message)}" if rv.message else "") + "</p>")
        if rv.original_proposal:
            body += f"<p class='muted'>the strategist had proposed: {esc(rv.original_proposal.get('what'))}</p>"
        if rv.kernel_given:
            body += "<p class='muted'>the reviewer gave the child kernel itself: no coder ran</p>"
        section("reviewer", "review (a person)", body)

    # the change (coder)
    c = s.coder
    body = f"<p class='muted'>coder: {esc(c.policy or '–')}</p>"
    if c.diff:
        body += side_by_side(c.diff)
    if c.error or c.note:
        body += f"<p class='why'>{esc(c.error or c.note)}</p>"
    section("coder", "the change (coder)", body + _role_usage(d, s, "coder", out_dir))

    # verdict and time (verifier)
    if s.result:
        r = s.result
        body = f"<p>{badge(r.verdict, 'ok' if r.verdict == 'pass' else 'bad')} <code>{esc(r.reason)}</code> {esc(r.detail)}</p>"
        if t:
            rows = [("median", f"{ms(t.median_ms)} (p25–p75 {ms(t.p25_ms)}–{ms(t.p75_ms)}, {t.reps} repetitions)"),
                    ("noise band", f"±{t.noise_band * 100:.1f} % (A/A difference of the eager runs)"),
                    ("vs parent", f"{x(dec.measured_speedup, 3)} measured · {x(dec.predicted_speedup)} predicted"),
                    ("vs eager", f"{x(t.speedup_vs_eager)} ({esc(t.vs_eager)}; eager {ms(t.eager_ms)})"),
                    ("vs torch.compile", f"{x(t.speedup_vs_compile)} ({esc(t.vs_compile or '–')}; {ms(t.compile_ms)})"),
                    ("floor", f"{pct(t.fraction_of_floor)} of it ({ms(t.floor_ms)}, {esc(t.bound or '–')}-bound)")]
            if t.suspect:
                rows.append(("suspect", esc("; ".join(t.suspect))))
            body += kv(rows)
        elif r.timing_unavailable:
            body += f"<p class='muted'>not timed: {esc(r.timing_unavailable)}</p>"
        if s.verify_s is not None:
            body += f"<p class='muted'>verified in {s.verify_s:.1f} s</p>"
        if s.tuning:
            body += tuning_block(s.tuning)
    else:
        body = '<p class="muted">nothing to verify (no child was made)</p>'
    section("verifier", "verdict and time (verifier)", body)

    # archive decision
    section("archive", "archive decision",
            f"<p>{badge(dec.decision, dec.decision)} {esc(dec.why)}</p>"
            f"<p class='muted'>step tokens {s.tokens:,} · cost ${s.cost_usd:.4f}</p>")
    roles_present = " ".join(["analyst", "strategist", "coder", "verifier", "archive"] + (["reviewer"] if s.review else []))
    return (f'<section class="step{" onbest" if on_best else ""}" id="{esc(s.step_id)}" data-verdict="{esc(verdict)}" '
            f'data-decision="{esc(dec.decision)}" data-kind="{esc(category)}" data-roles="{roles_present}" '
            f'data-best="{int(on_best)}">' + "".join(parts) + "</section>")


def tuning_block(tr: TuneRecord) -> str:
    """The builtin's sweep of a structural child's knobs, as part of the step: one line, and the variants judged
    (the untuned child first) with the one chosen marked."""
    body = f"<p class='why'>{esc(tr.words())}</p>"
    if not tr.tried:
        return body
    rows = [f"<tr><td>as written</td><td><code>{esc(tr.from_[:12])}</code></td><td>{ms(tr.from_ms)}</td>"
            f"<td>pass</td><td></td></tr>"]
    for v in tr.tried:
        rows.append(f"<tr><td>{esc(v.what)}</td><td><code>{esc(v.kernel[:12])}</code></td><td>{ms(v.median_ms)}</td>"
                    f"<td>{esc(v.verdict)} <code>{esc(v.reason)}</code></td>"
                    f"<td>{badge('chosen', 'elite') if v.key == tr.chose else ''}</td></tr>")
    return (body + "<table class='kv tune'><tr><th>variant</th><th>kernel</th><th>median</th><th>verdict</th><th></th></tr>"
            + "".join(rows) + "</table>")


def _role_usage(d: RunData, s: StepRecord, role: str, out_dir: Path) -> str:
    u = s.llm.get(role)
    if u is None:
        return ""
    bits = [f"{esc(u.model)}: {u.calls} calls"
            + (f", {u.retries} retries" if u.retries else "")
            + f", {u.input_tokens:,} in + {u.output_tokens:,} out tokens, ${u.cost_usd:.4f}"]
    if u.error:
        bits.append(f"<span class='why'>{esc(u.error_kind or 'error')}: {esc(u.error)}</span>")
    out = f"<p class='usage'>{' · '.join(bits)}</p>"
    if u.reasoning:
        out += ("<details><summary>the model's reasoning</summary><pre class='text'>"
                + esc("\n\n".join(u.reasoning)) + "</pre></details>")
    if u.transcript:
        link, prompt = _transcript(d, u.transcript, out_dir)
        if prompt:
            out += f"<details><summary>what the {esc(role)} was shown</summary><pre class='text'>{esc(prompt)}</pre></details>"
        out += f"<p class='muted'>transcript: {link}</p>"
    return out


# -- the page --------------------------------------------------------------------------------------------

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;color:#1f2328;margin:0 auto;max-width:1400px;padding:16px 24px}
h1{font-size:20px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #d0d7de}h3{font-size:15px;margin:0 0 4px}
h4{font-size:13px;margin:10px 0 4px;color:#57606a;text-transform:uppercase;letter-spacing:.03em}
code,pre,.diff{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
table.kv th{text-align:left;padding:2px 14px 2px 0;color:#57606a;font-weight:600;vertical-align:top;white-space:nowrap}
table.kv td{padding:2px 0}table.tune td{padding:2px 14px 2px 0}
.badge{display:inline-block;padding:0 7px;border-radius:10px;font-size:12px;font-weight:600;border:1px solid}
.b-ok,.b-elite{color:#1a7f37;border-color:#1a7f37}.b-bad,.b-rejected{color:#cf222e;border-color:#cf222e}
.b-live,.b-unmeasured{color:#9a6700;border-color:#9a6700}.b-niche{color:#8250df;border-color:#8250df}
.b-kind{color:#0969da;border-color:#0969da}.b-best{color:#fff;background:#1a7f37;border-color:#1a7f37}
.muted{color:#57606a}.why{color:#cf222e}.waiting{background:#fff8c5;padding:6px 10px;border-radius:6px}
svg text{font-size:11px;fill:#1f2328}svg .grid{stroke:#eaeef2}svg .best{stroke:#1a7f37;stroke-width:2}
svg .bestlabel,.bestlabel{fill:#1a7f37;color:#1a7f37;font-weight:600}
svg.tree text{paint-order:stroke;stroke:#fff;stroke-width:3px;stroke-linejoin:round}
.treebox{overflow:auto;max-height:640px;border:1px solid #d0d7de;border-radius:6px}
.edge{fill:none;stroke:#8c959f;stroke-width:1.2}.edge.best{stroke:#1a7f37;stroke-width:3}.edge.failed{stroke:#ff8182;stroke-dasharray:3 3}
.node{fill:#fff;stroke:#57606a;stroke-width:1.5}.node.best{fill:#1a7f37;stroke:#1a7f37}.node.failed{fill:#ffebe9;stroke:#cf222e}
svg text.failed,.failed{fill:#cf222e;color:#cf222e}
.dot{display:inline-block;width:9px;height:9px;border-radius:50%;margin:0 3px 0 8px}
section.step{border:1px solid #d0d7de;border-radius:8px;padding:10px 14px;margin:12px 0}
section.step.onbest{border-left:5px solid #1a7f37}
.sec{border-top:1px dashed #eaeef2;padding-top:2px}
table.diff{border-collapse:collapse;width:100%;table-layout:fixed}table.diff td{padding:0 6px;white-space:pre-wrap;word-break:break-all;vertical-align:top}
table.diff col.ln{width:44px}table.diff td.ln{color:#8c959f;text-align:right;user-select:none}
td.del{background:#ffebe9}td.add{background:#dafbe1}td.empty{background:#f6f8fa}tr.hunk td{color:#8250df;background:#f6f8fa}
pre.text{white-space:pre-wrap;background:#f6f8fa;padding:8px;border-radius:6px;max-height:420px;overflow:auto}
.filters{position:sticky;top:0;background:#fff;padding:8px 0;border-bottom:1px solid #d0d7de;z-index:2}
.filters fieldset{display:inline-block;border:1px solid #d0d7de;border-radius:6px;margin:2px 6px 2px 0;padding:2px 8px}
.filters legend{font-size:12px;color:#57606a}.filters label{margin-right:8px;font-size:13px;white-space:nowrap}
.hidden{display:none}
"""

SCRIPT = """
(function(){
  var form=document.getElementById('filters'); if(!form) return; form.hidden=false;
  function chosen(name){var v=[];form.querySelectorAll('input[name='+name+']').forEach(function(i){if(i.checked)v.push(i.value)});return v}
  function apply(){
    var verdicts=chosen('verdict'),decisions=chosen('decision'),kinds=chosen('kind'),roles=chosen('role');
    var onlyBest=form.querySelector('#only-best').checked,shown=0;
    document.querySelectorAll('section.step').forEach(function(s){
      var ok=verdicts.indexOf(s.dataset.verdict)>=0&&decisions.indexOf(s.dataset.decision)>=0&&kinds.indexOf(s.dataset.kind)>=0&&(!onlyBest||s.dataset.best==='1');
      s.classList.toggle('hidden',!ok); if(ok) shown++;
      s.querySelectorAll('.sec').forEach(function(sec){
        var role=(sec.className.match(/role-(\\w+)/)||[])[1]; sec.classList.toggle('hidden',roles.indexOf(role)<0);});
    });
    document.getElementById('shown').textContent=shown;
  }
  form.addEventListener('change',apply); apply();
  document.body.dataset.ready='1';
})();
"""


def _filters(d: RunData) -> str:
    def group(name: str, title: str, values: list[str]) -> str:
        return (f"<fieldset><legend>{esc(title)}</legend>" + "".join(
            f'<label><input type="checkbox" name="{name}" value="{esc(v)}" checked> {esc(v)}</label>' for v in values)
            + "</fieldset>")

    verdicts = sorted({s.verdict or "none" for s in d.steps})
    decisions = sorted({s.decision.decision for s in d.steps})
    kinds = sorted({s.proposal.category if s.proposal else "none" for s in d.steps})
    roles = [r for r in ROLES if r != "reviewer" or any(s.review for s in d.steps)]
    return ('<form id="filters" class="filters" hidden>' + group("verdict", "verdict", verdicts)
            + group("decision", "archive decision", decisions) + group("kind", "kind of move", kinds)
            + group("role", "role", roles)
            + '<label><input type="checkbox" id="only-best"> only the best path</label> '
            + f'<span class="muted"><span id="shown">{len(d.steps)}</span> of {len(d.steps)} steps shown</span></form>')


def render(d: RunData, out_dir: Path) -> str:
    best = set(d.best_path())
    cards = "\n".join(card(d, i, s, best, out_dir) for i, s in enumerate(d.steps))
    best_src = ""
    if d.info.best_kernel:
        try:
            best_src = (f'<h2 id="k-{esc(d.info.best_kernel)}">the best kernel <code>{esc(d.info.best_kernel)}</code></h2>'
                        f'<details><summary>source</summary><pre class="text">{esc(d.run.kernel(d.info.best_kernel))}'
                        "</pre></details>")
        except Exception:  # noqa: BLE001 - a kernel file gone missing is shown as such, not raised
            best_src = f"<p class='why'>the best kernel's source {esc(d.info.best_kernel)} is missing</p>"
    csp = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>kernelwright {esc(d.info.id)} — {esc(Path(d.info.problem).name)}</title>
<style>{CSS}</style></head>
<body>
{header(d)}
<h2>speedup over steps</h2>
{speedup_chart(d)}
<h2>lineage</h2>
{lineage_svg(d, best)}
<h2>steps</h2>
{_filters(d) if d.steps else '<p class="muted">No step recorded yet.</p>'}
{cards}
{best_src}
<script>{SCRIPT}</script>
</body></html>
"""


_SECRETS: ContextVar[list[str]] = ContextVar("report_secrets", default=[])
"""what `esc` redacts while `write_report` renders a page (context-local: two renders never share it)"""


def write_report(run: Run, out: Path | None = None) -> Path:
    """Write the report (default: the run directory's report.html); returns its path. UsageError: a trace
    this version cannot read; OSError: the file could not be written."""
    out = out or run.path / "report.html"
    data = load(run)
    token = _SECRETS.set(run_secrets(data.info.config.settings))
    try:
        page = render(data, out.resolve().parent)
    finally:
        _SECRETS.reset(token)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, page)
    return out
