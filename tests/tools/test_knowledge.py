"""The knowledge store (issue 23, item 3): entries appended as JSON lines, read back tolerating a bad line, found by
id or prefix, exported and cleared; its default file under the user's data directory. No GPU, no model."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from kernelwright.tools.knowledge import Knowledge, KnowledgeStore, default_path, problem_name


def entry(run: str = "20261126-043312-a1b2c3", step: str = "g1b0", **kw: object) -> Knowledge:
    base: dict[str, object] = dict(id=f"{run}/{step}", date="2026-11-26T04:40:00", run_id=run, step_id=step,
                                   problem="40_LayerNorm", kinds=["row_reduction"], gpu="NVIDIA H200",
                                   versions={"torch": "2.11", "triton": "3.6"}, bottleneck="memory",
                                   evidence=["L2 hit 26 %"], category="reduction", key="split-row-64",
                                   what="split each row over 64 programs", speedup=1.26, noise_band=0.02,
                                   child_ms=0.23, vs_compile=1.34, fraction_of_floor=0.58, policy="openai:m")
    return Knowledge.model_validate({**base, **kw})


def test_append_then_read_back(tmp_path: Path) -> None:
    store = KnowledgeStore(tmp_path / "sub" / "k.jsonl")  # the folder is made on the first append
    assert store.entries() == []
    a, b = entry(), entry(step="g2b1", key="chunk-major")
    store.append(a)
    store.append(b)
    assert store.entries() == [a, b]
    lines = (tmp_path / "sub" / "k.jsonl").read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == [a.id, b.id]


def test_a_corrupt_line_is_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "k.jsonl"
    store = KnowledgeStore(path)
    store.append(entry())
    with open(path, "a") as f:
        f.write('{"id": "half a line"\n')  # not an entry: cut short
        f.write("not json at all\n")
    store.append(entry(step="g3b0"))
    with open(path, "a") as f:
        f.write('{"id": "x", "run_id"')  # a write cut short, without its newline
    store.append(entry(step="g4b0"))  # closes that line first: the new entry never joins it
    got = store.entries()
    assert [e.step_id for e in got] == ["g1b0", "g3b0", "g4b0"]
    assert store.skipped == 3


def test_find_by_id_or_unique_prefix(tmp_path: Path) -> None:
    store = KnowledgeStore(tmp_path / "k.jsonl")
    store.append(entry(step="g1b0"))
    store.append(entry(step="g1b1"))
    store.append(entry(run="20261127-000000-ffffff", step="g1b0"))
    assert store.find("20261126-043312-a1b2c3/g1b1").step_id == "g1b1"  # type: ignore[union-attr]
    assert store.find("20261127").run_id == "20261127-000000-ffffff"  # type: ignore[union-attr]
    assert store.find("20261126-043312-a1b2c3/g1b") is None and len(store.matching("20261126-043312-a1b2c3/g1b")) == 2
    assert store.find("nothing") is None


def test_the_same_step_recorded_again_is_one_entry(tmp_path: Path) -> None:
    store = KnowledgeStore(tmp_path / "k.jsonl")
    store.append(entry(speedup=1.2))
    store.append(entry(speedup=1.3))  # a resumed run recording its step again
    (only,) = store.entries()
    assert only.speedup == 1.3


def test_export_and_clear(tmp_path: Path) -> None:
    store = KnowledgeStore(tmp_path / "k.jsonl")
    store.append(entry())
    store.append(entry(step="g2b0"))
    out = tmp_path / "out.jsonl"
    assert store.export(out) == 2
    assert [Knowledge.model_validate_json(x).step_id for x in out.read_text().splitlines()] == ["g1b0", "g2b0"]
    assert store.export_lines() == out.read_text().splitlines()
    assert store.clear() == 2
    assert store.entries() == [] and (tmp_path / "k.jsonl").read_text() == ""
    store.append(entry(step="g9b9"))  # still usable after a clear
    assert [e.step_id for e in store.entries()] == ["g9b9"]


def test_concurrent_appends_keep_every_line_whole(tmp_path: Path) -> None:
    store = KnowledgeStore(tmp_path / "k.jsonl")

    def add(i: int) -> None:
        for j in range(20):
            KnowledgeStore(store.path).append(entry(step=f"g{i}b{j}", what="x" * 200))

    threads = [threading.Thread(target=add, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.entries()) == 80 and store.skipped == 0


def test_the_default_file_is_under_the_users_data_directory(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_path() == tmp_path / "data" / "kernelwright" / "knowledge.jsonl"
    assert KnowledgeStore().path == default_path()
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_path() == tmp_path / "home" / ".local" / "share" / "kernelwright" / "knowledge.jsonl"


def test_the_suite_never_writes_into_the_real_home() -> None:
    """tests/conftest.py points XDG_DATA_HOME at a folder of the session's own."""
    assert "kw-test-data-" in str(default_path())


def test_problem_names() -> None:
    assert problem_name("examples/softmax/problem.py") == "softmax"
    assert problem_name(".kb/level1/40_LayerNorm.py") == "40_LayerNorm"
