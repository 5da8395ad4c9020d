"""Drive the graph `langgraph dev` serves (langgraph.json) through the LangGraph SDK, as Agent Chat UI does:
start a thread on a problem, read each pause's human-in-the-loop request, answer reject then approve, and
print the thread's end state. Needs a running server: `langgraph dev --no-browser --no-reload` (pip install
"langgraph-cli[inmem]") in the repository root, then: python bench/langgraph_dev_check.py [URL]."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from langgraph_sdk import get_client

ROOT = Path(__file__).resolve().parents[1]


async def main(url: str) -> int:
    client = get_client(url=url)
    thread = await client.threads.create()
    inp = {"problem": str(ROOT / "tests/graphs/add_problem.py"), "seed_kernel": str(ROOT / "tests/graphs/add_seed.py"),
           "iterations": 1, "device": "cpu", "runs_dir": tempfile.mkdtemp(prefix="kw-langgraph-")}
    await client.runs.wait(thread["thread_id"], "optimize", input=inp)
    # a rejected proposal does not count against the one iteration: the second pause follows it
    for answer in ({"decisions": [{"type": "reject", "message": "not now"}]}, {"decisions": [{"type": "approve"}]}):
        state = await client.threads.get_state(thread["thread_id"])
        interrupts = state.get("interrupts") or [i for t in state.get("tasks", []) for i in t.get("interrupts", [])]
        if not interrupts:
            print("no pause where one was expected:", state.get("values"))
            return 1
        req = interrupts[0]["value"]
        print(f"paused: {req['step_id']}: {req['action_requests'][0]['args'].get('what')} "
              f"(allowed: {req['review_configs'][0]['allowed_decisions']}) -> {answer['decisions'][0]['type']}")
        await client.runs.wait(thread["thread_id"], "optimize",
                               command={"resume": {interrupts[0]["id"]: answer}})
    state = await client.threads.get_state(thread["thread_id"])
    v = state["values"]
    print(f"thread {thread['thread_id']}: run {v.get('run_id')} {v.get('status')} ({v.get('stop_reason')})")
    return 0 if v.get("status") == "finished" else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:2024")))
