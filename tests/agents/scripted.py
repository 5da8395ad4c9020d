"""A scripted chat model for tests: `bind_tools` returns itself, each call replays the next AIMessage."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field


class Scripted(BaseChatModel):
    script: list[Any] = Field(default_factory=list)
    """AIMessages to return in order; an exception instance is raised instead"""
    seen: list[list[BaseMessage]] = Field(default_factory=list)
    """the messages of every call"""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Scripted:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        if not self.script:
            raise AssertionError("the script ran out")
        nxt = self.script.pop(0)
        if isinstance(nxt, BaseException):
            raise nxt
        return ChatResult(generations=[ChatGeneration(message=nxt)])


def call(name: str, args: dict[str, Any], i: int = 0, **usage: int) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"{name}-{i}", "type": "tool_call"}],
                     usage_metadata={"input_tokens": usage.get("i", 100), "output_tokens": usage.get("o", 10),
                                     "total_tokens": usage.get("i", 100) + usage.get("o", 10)})


def malformed(name: str, text: str, i: int = 0) -> AIMessage:
    return AIMessage(content="", invalid_tool_calls=[{"name": name, "args": text, "id": f"bad-{i}",
                                                      "error": "arguments are not valid JSON",
                                                      "type": "invalid_tool_call"}],
                     usage_metadata={"input_tokens": 50, "output_tokens": 5, "total_tokens": 55})


DIAGNOSIS = {"bottleneck": "memory", "evidence": ["no GPU timing (CPU mode)"], "headroom": None,
             "summary": "Elementwise add: bandwidth-bound."}
PROPOSAL = {"category": "tiling", "what": "BLOCK 256 -> 512", "why": "more bytes in flight per program",
            "predicted_speedup": 1.1, "risk": "low", "key": "BLOCK=512"}
