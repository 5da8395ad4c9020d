"""`kernelwright export`: a real run (scripted model, CPU) exported as steps, SFT and RL records that validate
against their published JSON schemas and carry the run's own sources; the high-gain filter on timed steps
written into a copy of the run (kept: verified, beyond the noise band, not suspect, at least the minimum);
secrets planted in the run never leave; two runs together; the CLI's file output and one-sentence errors."""

from __future__ import annotations

import copy
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from kernelwright import export
from kernelwright.evaluators import Timing, result
from kernelwright.tools.runstore import Run, RunStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scripted_run import SECRET, STEP1, scripted_run  # noqa: E402

from kernelwright.cli import app  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FORMATS = ("steps", "sft", "rl")


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return scripted_run(tmp_path_factory.mktemp("export"))


def copy_run(made: tuple[Path, str], dest: Path, new_id: str | None = None) -> tuple[Path, Run]:
    """A copy of the made run under dest/runs (with another id when asked), safe to change."""
    runs, run_id = made
    new_id = new_id or run_id
    shutil.copytree(runs / run_id, dest / "runs" / new_id)
    info = json.loads((dest / "runs" / new_id / "run.json").read_text())
    (dest / "runs" / new_id / "run.json").write_text(json.dumps({**info, "id": new_id}))
    return dest / "runs", RunStore(dest / "runs").open(new_id)


def cli(*args: Any) -> Any:
    return CliRunner().invoke(app, ["export", *map(str, args)])


def exported(runs: Path, *ids: str, fmt: str = "steps", min_gain: float | None = None) -> list[dict[str, Any]]:
    gain = ["--min-gain", str(min_gain)] if min_gain is not None else []
    r = cli(*ids, "--format", fmt, "--run-dir", runs, *gain)
    assert r.exit_code == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def schema(fmt: str) -> dict[str, Any]:
    r = cli("--schema", "--format", fmt)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def step_id(rec: dict[str, Any]) -> str:
    return rec["step_id"] if "step_id" in rec else rec["metadata"]["step_id"]


# -- (a) every format validates against its schema and carries the run's own sources ---------------------------


def test_every_format_validates_and_carries_the_runs_sources(made: tuple[Path, str]) -> None:
    runs, run_id = made
    run = RunStore(runs).open(run_id)
    trace = {r["step_id"]: r for r in run.trace()}
    problem = run.problem_source()
    by_format = {fmt: exported(runs, run_id, fmt=fmt) for fmt in FORMATS}
    for fmt, records in by_format.items():
        assert [step_id(r) for r in records] == ["g1b0", "g2b0", "g3b0"], fmt
        for rec in records:
            jsonschema.validate(rec, schema(fmt))
            assert rec["format"] == f"kernelwright.export.{fmt}/1"

    for rec in by_format["steps"]:
        s = trace[rec["step_id"]]
        assert rec["run"] == run_id and rec["problem_source"] == problem
        assert rec["parent"]["hash"] == s["parent"] and rec["parent"]["source"] == run.kernel(s["parent"])
        assert rec["diff"] == s["coder"]["diff"] and rec["proposal"] == s["proposal"]
        if s["child"]:
            assert rec["child"]["source"] == run.kernel(s["child"]) and rec["outcome"]["verdict"] == "pass"
        else:  # the coder gave up: exported, and the record says so
            assert rec["child"] is None and rec["outcome"]["verdict"] is None
            assert rec["outcome"]["reason"] == "no_child" and rec["outcome"]["detail"] == s["coder"]["error"]
        # CPU: nothing is timed, so there is no gain and nothing counts as improved
        assert rec["outcome"]["gain"] is None and rec["outcome"]["improved"] is False
        # what each model role saw: the first user message of its transcript, whole (under the bound here)
        assert [e["role"] for e in rec["evidence"]] == ["analyst", "strategist", "coder"]
        for e in rec["evidence"]:
            usage = s["llm"][e["role"]]
            first = json.loads((run.path / usage["transcript"]).read_text())[0]["content"]
            assert e["source"] == "transcript" and e["seen"] == first and e["seen_chars"] == len(first)
            assert e["reasoning"] == usage["reasoning"]

    for sft, rl in zip(by_format["sft"], by_format["rl"]):
        s = trace[sft["metadata"]["step_id"]]
        system, user, assistant = sft["messages"]
        assert [m["role"] for m in sft["messages"]] == ["system", "user", "assistant"]
        assert run.kernel(s["parent"]) in user["content"] and problem in user["content"]
        assert s["diagnosis"]["summary"] in user["content"]
        if s["child"]:
            assert s["coder"]["diff"] in assistant["content"] and s["proposal"]["what"] in assistant["content"]
        assert rl["prompt"] == [system, user] and rl["problem"] == problem
        assert rl["parent"] == run.kernel(s["parent"]) and rl["metadata"] == sft["metadata"]
        assert rl["child"] == (run.kernel(s["child"]) if s["child"] else None)
        assert rl["reward"] == sft["outcome"] and rl["reward"]["decision"] == s["decision"]["decision"]


def test_builtin_roles_evidence_is_rebuilt_from_the_record(made: tuple[Path, str], tmp_path: Path) -> None:
    runs, run = copy_run(made, tmp_path)
    records = run.trace()
    for r in records:  # the same steps as a builtin-policy run records them: no model, no transcript
        r.update(llm={}, policy="builtin", role_models={}, tokens=0, cost_usd=0.0)
        r["coder"]["policy"] = "builtin"
    (run.path / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    shutil.rmtree(run.path / "transcripts")
    recs = exported(runs, run.id)
    for rec, s in zip(recs, records):
        jsonschema.validate(rec, schema("steps"))
        assert rec["models"] == {"analyst": "builtin", "strategist": "builtin", "coder": "builtin"}
        seen = {e["role"]: e["seen"] for e in rec["evidence"] if e["source"] == "record"}
        assert list(seen) == ["analyst", "strategist", "coder"]
        profile = rec["parent"]["profile"]
        assert "no timing (no GPU" in profile and "add_kernel: " in profile
        assert all(profile in text for text in seen.values())
        assert s["diagnosis"]["summary"] not in seen["analyst"]  # its own output, not its input
        assert s["diagnosis"]["summary"] in seen["strategist"] and s["proposal"]["what"] in seen["coder"]


def test_the_schema_rejects_a_broken_record(made: tuple[Path, str]) -> None:
    runs, run_id = made
    for fmt in FORMATS:
        rec = exported(runs, run_id, fmt=fmt)[0]
        key = "outcome" if fmt != "rl" else "reward"
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**rec, key: {**rec[key], "gain": "a lot"}}, schema(fmt))
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**rec, "format": f"kernelwright.export.{fmt}/2"}, schema(fmt))


def test_docs_export_md_is_generated_from_the_models() -> None:
    assert (REPO / "docs" / "export.md").read_text() == export.schema_markdown(), \
        "docs/export.md is stale: regenerate it with python -c 'from kernelwright.export import " \
        "schema_markdown; print(schema_markdown(), end=\"\")' > docs/export.md"


# -- (b) the high-gain filter -----------------------------------------------------------------------------------


def timing(median: float, noise: float = 0.01, suspect: tuple[str, ...] = ()) -> dict[str, Any]:
    """A GPU timing as the evaluator writes it (eager 1.2 ms, torch.compile 1.1 ms)."""
    return Timing(median_ms=median, p25_ms=median * 0.99, p75_ms=median * 1.01, min_ms=median * 0.98,
                  max_ms=median * 1.04, reps=30, wall_median_ms=median + 0.012, noise_band=noise, eager_ms=1.2,
                  speedup_vs_eager=1.2 / median, vs_eager="faster", compile_mode="default",
                  compile_modes={"default": 1.1}, compile_ms=1.1, speedup_vs_compile=1.1 / median,
                  vs_compile="faster", clocks={"sm_mhz_before": 1980, "sm_mhz_after": 1980}, floor_ms=0.3,
                  bound="memory", fraction_of_floor=0.3 / median, flops=1e3, bytes=1.2e4, best_baseline_ms=1.1,
                  best_baseline="torch.compile", suspect=list(suspect), timing_sets=4,
                  measure_s=2.5).model_dump(mode="json")


def put_kernel(run: Run, name: str, verdict: str, t: dict[str, Any]) -> str:
    template = run.eval(run.trace()[0]["child"])
    assert template is not None
    h = run.put_kernel(STEP1 + f"# {name}\n")
    run.put_eval(h, {**template, "verdict": verdict, "reason": "ok" if verdict == "pass" else "wrong_output",
                     "device": "cuda:0", "timing": t, "timing_unavailable": None})
    return h


def add_step(run: Run, name: str, parent: str, verdict: str, t: dict[str, Any]) -> str:
    """A step from `parent` to a new child named `name`, judged `verdict` with timing `t`; returns its step id."""
    rec = copy.deepcopy(run.trace()[0])
    n = len(run.trace())
    child = put_kernel(run, name, verdict, t)
    sid = f"g{n + 1}b0"
    rec.update(step=n, step_id=sid, generation=n + 1, parent=parent, child=child, verdict=verdict)
    rec["result"].update(verdict=verdict, reason="ok" if verdict == "pass" else "wrong_output")
    rec["decision"].update(step=n, step_id=sid, parent_id=parent, child_id=child)
    assert run.append_step(rec)
    return sid


@pytest.fixture(scope="module")
def timed(made: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, str]]:
    """A copy of the run whose seed is timed at 1.0 ms (noise band 2 %), with six timed steps from it."""
    runs, run = copy_run(made, tmp_path_factory.mktemp("timed"))
    seed = run.trace()[0]["parent"]
    run.put_eval(seed, {**(run.eval(seed) or {}), "device": "cuda:0", "timing": timing(1.0, noise=0.02),
                        "timing_unavailable": None})
    ids = {
        "fast": add_step(run, "fast", seed, "pass", timing(0.80)),  # gain 0.25, far beyond the 2 % band
        "noisy": add_step(run, "noisy", seed, "pass", timing(0.95, noise=0.08)),  # gain 0.053 inside its 8 % band
        "suspect": add_step(run, "suspect", seed, "pass", timing(0.50, suspect=("faster than the roofline floor",))),
        # timed only so that the verdict alone must drop it
        "failed": add_step(run, "failed", seed, "fail", timing(0.50)),
        "modest": add_step(run, "modest", seed, "pass", timing(0.97)),  # gain 0.031: beyond the band, below 5 %
    }
    throttled = put_kernel(run, "throttled parent", "pass", timing(1.0, suspect=("SM clock throttled",)))
    ids["suspect_parent"] = add_step(run, "after a throttled parent", throttled, "pass", timing(0.70))
    return runs, run.id, ids


def test_the_filter_keeps_verified_gains_beyond_the_noise_band(timed: tuple[Path, str, dict[str, str]]) -> None:
    runs, run_id, ids = timed
    recs = {r.step_id: r for r in export.export_records(export.open_runs([run_id], runs))}
    assert len(recs) == 9  # without --min-gain every step: the run's three and the six written here
    fast = recs[ids["fast"]].outcome
    assert fast.gain == pytest.approx(0.25) and fast.noise_band == 0.02 and fast.parent_ms == 1.0
    assert fast.child_ms == 0.8 and fast.speedup_vs_eager == pytest.approx(1.5) and fast.improved
    assert recs[ids["noisy"]].outcome.noise_band == 0.08
    assert recs[ids["suspect_parent"]].outcome.suspect == ["parent: SM clock throttled"]
    why = {name: export.dropped_by(recs[sid].outcome, 0.05) for name, sid in ids.items()}
    assert why == {"fast": None, "noisy": "gain within the noise band",
                   "suspect": "suspect timing (faster than the roofline floor)", "failed": "verdict fail",
                   "modest": "gain below the minimum", "suspect_parent": "suspect timing (parent: SM clock throttled)"}
    assert {export.dropped_by(recs[s].outcome, 0.05) for s in ("g1b0", "g2b0", "g3b0")} == \
        {"not timed", "verdict none (no child)"}
    assert {sid for sid, r in recs.items() if r.outcome.improved} == {ids["fast"], ids["modest"]}

    for fmt in FORMATS:  # the CLI's --min-gain, every format
        assert [step_id(r) for r in exported(runs, run_id, fmt=fmt, min_gain=0.05)] == [ids["fast"]]
        assert [step_id(r) for r in exported(runs, run_id, fmt=fmt, min_gain=0.03)] == [ids["fast"], ids["modest"]]
        assert [step_id(r) for r in exported(runs, run_id, fmt=fmt, min_gain=0.3)] == []
        assert len(exported(runs, run_id, fmt=fmt)) == 9
    rl = exported(runs, run_id, fmt="rl", min_gain=0.05)[0]
    jsonschema.validate(rl, schema("rl"))
    assert rl["reward"]["gain"] == pytest.approx(0.25) and rl["reward"]["speedup_vs_compile"] == pytest.approx(1.375)
    assert rl["metadata"]["device"] == "cuda:0"


# -- (c) secrets ------------------------------------------------------------------------------------------------


def test_no_secret_leaves_in_any_format(made: tuple[Path, str], tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    runs, run = copy_run(made, tmp_path)
    config_key, url_password, url_token = "plain-config-value-4242", "pw-in-the-url-77", "query-token-5150"
    info = json.loads((run.path / "run.json").read_text())
    info["config"]["settings"].update(api_key=config_key,
                                     base_url=f"https://me:{url_password}@llm.example/v1?token={url_token}")
    (run.path / "run.json").write_text(json.dumps(info))
    env_token = "plain-env-value-31337"  # a secret of the environment that does not look like a key
    leaked = f"{SECRET} {config_key} {url_password} {url_token} {env_token}"
    # as if models had echoed them: into a kernel, the problem, a transcript, reasoning, the proposal, the diff
    records = run.trace()
    first = records[0]
    kernel = run.kernel_path(first["child"])
    kernel.write_text(kernel.read_text() + f"# {leaked}\n")
    (run.path / "problem.py").write_text(run.problem_source() + f"# {leaked}\n")
    transcript = run.path / first["llm"]["strategist"]["transcript"]
    messages = json.loads(transcript.read_text())
    messages[0]["content"] += f"\nkey: {leaked}"
    transcript.write_text(json.dumps(messages))
    first["llm"]["analyst"]["reasoning"].append(f"the key is {leaked}")
    first["proposal"]["why"] += f" ({leaked})"
    first["coder"]["diff"] += f"+# {leaked}\n"
    (run.path / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    # with the keys in the environment; then without them (a key's shape, or run.json, still gives it away)
    for in_env in (True, False):
        if in_env:
            monkeypatch.setenv("OPENAI_API_KEY", SECRET)
            monkeypatch.setenv("KW_EXPORT_TOKEN", env_token)
        else:
            monkeypatch.delenv("OPENAI_API_KEY", raising=False)
            monkeypatch.delenv("KW_EXPORT_TOKEN")
        for fmt in FORMATS:
            r = cli(run.id, "--format", fmt, "--run-dir", runs)
            assert r.exit_code == 0, r.stderr
            assert "[redacted]" in r.stdout, fmt
            for secret in leaked.split()[:-1] + [env_token] * in_env:
                assert secret not in r.stdout, (fmt, secret)
            for line in r.stdout.splitlines():
                jsonschema.validate(json.loads(line), schema(fmt))


def test_key_shaped_strings_are_scrubbed_and_code_is_not() -> None:
    text = "x = 'sk-proj-Abc123def456ghi789jkl0' ; AKIAABCDEFGHIJKLMNOP; skip_the_first_block_iteration_1234 = 1"
    assert result.scrub(text, []) == "x = '[redacted]' ; [redacted]; skip_the_first_block_iteration_1234 = 1"
    assert result.config_secrets({"base_url": "http://localhost:8000/v1", "model": "openai:gpt-x",
                                  "auth": {"token": "tok-123456"}}) == ["tok-123456"]


# -- (d) two runs together --------------------------------------------------------------------------------------


def test_two_runs_export_together(made: tuple[Path, str], tmp_path: Path) -> None:
    runs, a = copy_run(made, tmp_path)
    _, b = copy_run(made, tmp_path, new_id="second-run")
    for fmt in FORMATS:
        recs = exported(runs, a.id, b.id, fmt=fmt)
        where = [(r["run"] if fmt == "steps" else r["metadata"]["run"], step_id(r)) for r in recs]
        assert where == [(run, s) for run in (a.id, b.id) for s in ("g1b0", "g2b0", "g3b0")]


# -- (e) the CLI: file output and one-sentence errors -----------------------------------------------------------


def test_out_writes_the_same_lines_to_a_file(made: tuple[Path, str], tmp_path: Path) -> None:
    runs, run_id = made
    target = tmp_path / "data" / "sft.jsonl"
    target.parent.mkdir()
    r = cli(run_id, "--format", "sft", "--out", target, "--run-dir", runs)
    assert r.exit_code == 0 and r.stdout == "", r.stderr
    assert r.stderr.strip() == f"export: 3 of 3 steps as sft to {target}"
    assert target.read_text() == cli(run_id, "--format", "sft", "--run-dir", runs).stdout
    assert sorted(p.name for p in target.parent.iterdir()) == ["sft.jsonl"]  # no temporary file left
    r = cli(run_id, "--min-gain", "0.05", "--out", target, "--run-dir", runs)
    assert r.exit_code == 0 and target.read_text() == "" and "export: 0 of 3 steps as steps" in r.stderr


def one_sentence(r: Any) -> str:
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), (r.exit_code, r.exception, r.output)
    assert r.stdout == "" and "Traceback" not in r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0].removeprefix("error: ")


def test_usage_errors_are_one_sentence(made: tuple[Path, str], tmp_path: Path) -> None:
    runs, run_id = made
    assert "no run 'nope'" in one_sentence(cli(run_id, "nope", "--run-dir", runs))
    assert one_sentence(cli(run_id, "--format", "csv", "--run-dir", runs)) == \
        "--format takes one of steps, sft, rl, not 'csv'"
    for bad in ("abc", "-0.1", "nan", "inf"):
        assert one_sentence(cli(run_id, "--min-gain", bad, "--run-dir", runs)).startswith("--min-gain takes a fraction")
    assert "give one or more run ids" in one_sentence(cli("--run-dir", runs))
    missing = tmp_path / "no" / "such" / "x.jsonl"
    assert one_sentence(cli(run_id, "--out", missing, "--run-dir", runs)) == \
        f"cannot write to {missing}: No such file or directory"
    assert not missing.parent.exists()
    assert "is a folder" in one_sentence(cli(run_id, "--out", tmp_path, "--run-dir", runs))


def test_unreadable_runs_are_one_sentence(made: tuple[Path, str], tmp_path: Path) -> None:
    runs, run = copy_run(made, tmp_path)
    target = tmp_path / "out.jsonl"
    with open(run.path / "trace.jsonl", "a") as f:
        f.write(json.dumps({"step": "not a step"}) + "\n")
    msg = one_sentence(cli(run.id, "--out", target, "--run-dir", runs))
    assert msg.startswith(f"run {run.id}: its trace does not match the step-record schema")
    assert not target.exists()

    runs, run = copy_run(made, tmp_path / "2")
    (run.path / "trace.jsonl").unlink()
    (run.path / "trace.jsonl").mkdir()
    assert one_sentence(cli(run.id, "--run-dir", runs)).startswith(f"run {run.id}: its trace cannot be read")

    runs, run = copy_run(made, tmp_path / "3")
    child = run.trace()[-1]["child"]
    run.kernel_path(child).unlink()
    assert one_sentence(cli(run.id, "--out", target, "--run-dir", runs)) == f"run {run.id} has no kernel {child}"
    assert not target.exists() and not list(tmp_path.glob(".out.jsonl.*"))  # the half-written file is gone
