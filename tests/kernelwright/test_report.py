"""`kernelwright report`: a real run (scripted model, CPU) rendered to one HTML file and opened in headless
Chromium with the network shut off: the page's own script runs under its Content-Security-Policy, every
step id is there, the diff and the lineage are laid out with a size, and the filters hide and show cards.
Also: a run in progress, hostile text, and the CLI's one-sentence errors. Chromium is Debian's package
(`.ci/run` installs it); without it the browser tests are skipped, the rest still run."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelwright.cli import app
from kernelwright.report import side_by_side, write_report
from kernelwright.tools.runstore import RunStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scripted_run import SECRET, scripted_run  # noqa: E402

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
needs_browser = pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium (apt-get install chromium)")

# measured in the browser after the page's own script: what is laid out, and what the filters do
PROBE = """<script>
(function(){
  function box(sel){var e=document.querySelector(sel); if(!e) return null; var r=e.getBoundingClientRect();
    return {w:Math.round(r.width),h:Math.round(r.height),shown:e.offsetParent!==null||e.tagName==='svg'};}
  function visible(){return Array.prototype.filter.call(document.querySelectorAll('section.step'),
    function(s){return s.offsetParent!==null}).map(function(s){return s.id});}
  var probe={ready:document.body.dataset.ready||null, diff:box('table.diff'), tree:box('svg.tree'),
    chart:box('svg.chart'), filters:box('#filters'), all:visible()};
  var pass=document.querySelector('#filters input[name=verdict][value=pass]');
  pass.checked=false; pass.dispatchEvent(new Event('change',{bubbles:true})); probe.without_pass=visible();
  pass.checked=true; pass.dispatchEvent(new Event('change',{bubbles:true}));
  var coder=document.querySelector('#filters input[name=role][value=coder]');
  coder.checked=false; coder.dispatchEvent(new Event('change',{bubbles:true}));
  probe.coder_sections_shown=Array.prototype.filter.call(document.querySelectorAll('.role-coder'),
    function(s){return s.offsetParent!==null}).length;
  var pre=document.createElement('pre'); pre.id='probe'; pre.textContent=JSON.stringify(probe);
  document.body.appendChild(pre);
})();
</script>"""


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return scripted_run(tmp_path_factory.mktemp("report"))


def browse(page: Path, tmp: Path) -> str:
    """The DOM after scripts ran, with every network request failing (no proxy answers, no name resolves)."""
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
         "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>", "--host-resolver-rules=MAP * ~NOTFOUND",
         f"--user-data-dir={tmp / 'profile'}", "--window-size=1400,1000", "--virtual-time-budget=5000",
         "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_the_page_stands_alone(made: tuple[Path, str], tmp_path: Path) -> None:
    runs, run_id = made
    run = RunStore(runs).open(run_id)
    page = write_report(run, tmp_path / "r.html").read_text()
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    # nothing to fetch: no external script, stylesheet, image, frame, font or import
    assert not re.search(r"<(script|img|iframe|link|embed|object|source)\b[^>]*\b(src|href)=", page, re.I)
    assert "@import" not in page and "url(" not in page and "http://" not in page and "https://" not in page
    assert SECRET not in page
    for rec in run.trace():
        assert f'id="{rec["step_id"]}"' in page


@needs_browser
def test_chromium_renders_it_offline_with_diff_lineage_and_filters(made: tuple[Path, str], tmp_path: Path) -> None:
    runs, run_id = made
    run = RunStore(runs).open(run_id)
    out = write_report(run, tmp_path / "report.html")
    out.write_text(out.read_text().replace("</body>", PROBE + "</body>"))
    dom = browse(out, tmp_path)
    probe = json.loads(re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S).group(1).replace("&quot;", '"'))
    steps = [r["step_id"] for r in run.trace()]
    assert len(steps) == 3
    assert probe["ready"] == "1"  # the page's own script ran under its CSP
    assert probe["all"] == steps  # every step's card, in order
    assert probe["diff"]["w"] > 600 and probe["diff"]["h"] > 50 and probe["diff"]["shown"]
    assert probe["tree"]["w"] > 200 and probe["tree"]["h"] > 50
    assert probe["filters"]["h"] > 0
    assert probe["chart"] is None  # a CPU run has no timing: a sentence instead of a chart
    assert "No kernel of this run was timed" in dom
    # the verdict filter hides the passing steps (g1b0, g3b0) and keeps the one that made no child
    assert probe["without_pass"] == [s for s, r in zip(steps, run.trace()) if r["verdict"] != "pass"] == ["g2b0"]
    assert probe["coder_sections_shown"] == 0
    # the lineage names every kernel and marks the proposal that made nothing
    assert "g2b0 ✗" in dom and all(r["child"][:6] in dom for r in run.trace() if r["child"])
    assert "BLOCK = 512" in dom and "NUM_WARPS = 8" in dom


@needs_browser
def test_a_screenshot_has_the_diff_colours(made: tuple[Path, str], tmp_path: Path) -> None:
    runs, run_id = made
    out = write_report(RunStore(runs).open(run_id), tmp_path / "report.html")
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--user-data-dir={tmp_path / 'profile'}", "--proxy-server=http://127.0.0.1:9",
                    "--window-size=1400,2400", f"--screenshot={shot}", out.as_uri()],
                   capture_output=True, timeout=120, check=True)
    pixels = _png_pixels(shot.read_bytes())
    assert (0xDA, 0xFB, 0xE1) in pixels  # an added line's background
    assert (0xFF, 0xEB, 0xE9) in pixels  # a removed line's (and the failed proposal's) background


def _png_pixels(data: bytes) -> set[tuple[int, int, int]]:
    """The colours of an 8-bit RGB(A) PNG (what Chromium writes), decoded with zlib alone."""
    import struct
    import zlib

    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, _, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride, prev, out = zlib.decompress(idat), w * bpp, bytearray(w * bpp), set()
    for row in range(len(raw) // (stride + 1)):
        f, line = raw[row * (stride + 1)], bytearray(raw[row * (stride + 1) + 1:(row + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out.update(tuple(line[i:i + 3]) for i in range(0, stride, bpp))
        prev = line
    return out


def test_a_run_in_progress_and_hostile_text(made: tuple[Path, str], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    runs, run_id = made
    copy = tmp_path / "runs" / run_id
    shutil.copytree(runs / run_id, copy)
    lines = (copy / "trace.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["proposal"]["what"] = "</code><script>alert('x')</script><img src=http://evil.example/x>"
    first["proposal"]["why"] = f"the key is {SECRET} and another sk-proj-9f8e7d6c5b4a39281706abcd"  # echoed by a model
    first["review"] = {"decision": "edit", "by": "chat:alice@host", "at": "2026-11-25T08:00:00",
                       "message": "<b>smaller</b> steps", "original_proposal": {"what": "BLOCK 256 -> 1024"}}
    (copy / "trace.jsonl").write_text(json.dumps(first) + "\n" + lines[1][: len(lines[1]) // 2])  # a line cut short
    info = json.loads((copy / "run.json").read_text())
    (copy / "run.json").write_text(json.dumps({**info, "status": "running", "stop_reason": None}))
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    page = write_report(RunStore(tmp_path / "runs").open(run_id)).read_text()
    assert "in progress" in page and 'id="g1b0"' in page and 'id="g2b0"' not in page
    assert "<script>alert" not in page and "<img src=http" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert len(re.findall(r"<script>", page)) == 1  # the page's own
    assert SECRET not in page and "sk-proj-9f8e7d6c5b4a" not in page and "the key is [redacted]" in page
    assert "review (a person)" in page and "chat:alice@host" in page and "&lt;b&gt;smaller&lt;/b&gt;" in page
    assert "the strategist had proposed: BLOCK 256 -&gt; 1024" in page


def test_the_diff_is_side_by_side() -> None:
    diff = "--- a.py\n+++ b.py\n@@ -3,3 +3,4 @@\n keep\n-old\n+new\n+added\n tail\n"
    table = side_by_side(diff)
    rows = re.findall(r"<tr>(.*?)</tr>", table)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in rows]
    assert cells == [["3", "keep", "3", "keep"], ["4", "old", "4", "new"], ["", "", "5", "added"],
                     ["5", "tail", "6", "tail"]]


def test_the_cli(made: tuple[Path, str], tmp_path: Path) -> None:
    runs, run_id = made
    runner = CliRunner()
    r = runner.invoke(app, ["report", run_id, "--run-dir", str(runs), "--out", str(tmp_path / "x" / "r.html")])
    assert r.exit_code == 0 and (tmp_path / "x" / "r.html").is_file(), r.output
    r = runner.invoke(app, ["report", "no-such-run", "--run-dir", str(runs)])
    assert r.exit_code == 2 and "no run 'no-such-run'" in r.output and "Traceback" not in r.output
    (tmp_path / "file").write_text("")
    r = runner.invoke(app, ["report", run_id, "--run-dir", str(runs), "--out", str(tmp_path / "file" / "r.html")])
    assert r.exit_code == 2 and "cannot write the report" in r.output and "Traceback" not in r.output
