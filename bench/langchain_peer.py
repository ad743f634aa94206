"""The in-process peer: LangChain ``create_agent`` with as many no-op middlewares as hartflow's default chain.

Not durable across processes, so it shows what the agent loop itself costs on LangGraph: once with the in-memory
checkpointer, once with the SQLite one (a file on disk, as a single-machine deployment would use). The model is a
real ``BaseChatModel`` answering the workload's scripted responses; the tool lists an empty directory.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from temporalio.deepagents.testing import FakeModel

from bench.workload import FINAL_ANSWER, PROMPT, ai_messages

Checkpointer = Literal["memory", "sqlite"]


class NoOpMiddleware(AgentMiddleware):
    """Every per-turn hook, doing nothing: the cost of the middleware machinery itself.

    before_model and after_model add a graph node each; the two wraps nest the model and the tool call.
    """

    def __init__(self, index: int) -> None:
        super().__init__()
        self._name = f"NoOp{index}"

    @property
    def name(self) -> str:
        return self._name

    async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return None

    async def aafter_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return None

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        return await handler(request)

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        return await handler(request)


def _ls_tool(workspace: Path) -> Any:
    @tool("ls")
    def ls(path: str) -> str:
        """List the files in a directory."""
        entries = sorted(os.listdir(workspace))
        return "\n".join(entries) if entries else "(empty)"

    return ls


async def timed_run(
    turns: int, run_tag: str, *, middlewares: int, checkpointer: Checkpointer, workspace: Path, db: Path
) -> float:
    """Seconds for one whole N-turn run (agent built beforehand; checkpointer opened beforehand)."""
    if checkpointer == "memory":
        return await _run(turns, run_tag, middlewares, InMemorySaver(), workspace)
    async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        return await _run(turns, run_tag, middlewares, saver, workspace)


async def _run(turns: int, run_tag: str, middlewares: int, saver: Any, workspace: Path) -> float:
    agent: Any = create_agent(
        model=FakeModel(ai_messages(turns, run_tag)),
        tools=[_ls_tool(workspace)],
        middleware=[NoOpMiddleware(index) for index in range(middlewares)],
        checkpointer=saver,
    )
    # Each turn is one graph step per before_model/after_model node, plus the model and the tool node.
    steps = (turns + 1) * (2 * middlewares + 2)
    config: dict[str, Any] = {"configurable": {"thread_id": run_tag}, "recursion_limit": steps + 10}
    began = time.perf_counter()
    result = await agent.ainvoke({"messages": [{"role": "user", "content": PROMPT}]}, config=config)
    elapsed = time.perf_counter() - began
    if result["messages"][-1].content != FINAL_ANSWER:
        raise RuntimeError(f"create_agent ({run_tag}) did not finish its script")
    return elapsed
