"""The API benchmark's workload as a LangGraph graph, served by ``langgraph dev`` (the peer of ``hartflow serve``).

The same N turns as hartflow's scripted run (``bench.workload.responses``): the agent node answers the Nth
response (by the number of AI messages so far, so concurrent runs never share a script position), the tools
node runs ``ls`` on a real empty directory. Each node writes a ``custom`` event stamped with the wall clock
when it emits, as hartflow's progress events carry the time of the workflow task that published them.
"""

from __future__ import annotations

import os
import tempfile
from datetime import UTC, datetime
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, MessagesState, StateGraph

from bench.workload import ai_messages

TURNS = int(os.environ.get("HARTFLOW_BENCH_API_TURNS", "5"))
_RESPONSES = ai_messages(TURNS)
_EMPTY = tempfile.mkdtemp(prefix="bench-ls-")


def _stamp(kind: str) -> None:
    get_stream_writer()({"kind": kind, "at": datetime.now(UTC).isoformat()})


def agent(state: MessagesState) -> dict[str, Any]:
    turn = sum(1 for message in state["messages"] if isinstance(message, AIMessage))
    _stamp("model_call")
    return {"messages": [_RESPONSES[turn].model_copy()]}


def tools(state: MessagesState) -> dict[str, Any]:
    last = state["messages"][-1]
    assert isinstance(last, AIMessage)
    results = [
        ToolMessage(content="\n".join(os.listdir(_EMPTY)) or "(empty)", tool_call_id=call["id"], name="ls")
        for call in last.tool_calls
    ]
    _stamp("tool_call")
    return {"messages": results}


def _next(state: MessagesState) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


builder = StateGraph(MessagesState)
builder.add_node("agent", agent)
builder.add_node("tools", tools)
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", _next, ["tools", END])
builder.add_edge("tools", "agent")
graph = builder.compile()
