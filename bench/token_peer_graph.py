"""The live-token benchmark's peer graph, served by ``langgraph dev``: one node that calls the timed provider
(``bench/timed_provider.py``, its URL in ``HARTFLOW_BENCH_PROVIDER``) through ``ChatOpenAI``, whose tokens
LangGraph streams to ``messages-tuple`` clients as they arrive."""

from __future__ import annotations

import os
from typing import Any

from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph

_MODEL = ChatOpenAI(
    model="bench-timed", base_url=os.environ.get("HARTFLOW_BENCH_PROVIDER"), api_key="bench", streaming=True
)


async def agent(state: MessagesState) -> dict[str, Any]:
    return {"messages": [await _MODEL.ainvoke(state["messages"])]}


builder = StateGraph(MessagesState)
builder.add_node("agent", agent)
builder.add_edge(START, "agent")
builder.add_edge("agent", END)
graph = builder.compile()
