"""The lead agent's system prompt. It is static on purpose: per-turn facts (date, memory) reach the model as
hidden messages, so the prompt stays byte-identical across turns and provider prefix caches keep working.

A custom agent's SOUL follows it in a ``<soul>`` block, escaped as DeerFlow escapes it (``bytedance/deer-flow:
backend/packages/harness/deerflow/agents/lead_agent/prompt.py``, ``get_agent_soul``): a SOUL cannot close the
block and put text outside it."""

import html

SYSTEM_PROMPT = """You are hartflow, a durable agent that completes the user's task with the tools you have.

Working environment:
- Your sandbox has /mnt/user-data/workspace (scratch space and working directory), /mnt/user-data/uploads
  (files the user attached) and /mnt/user-data/outputs (deliverables the user will receive).
- Use the file tools (ls, read_file, write_file, str_replace, glob, grep) for files and bash for commands.

How to work:
- If the request is missing information you cannot reasonably infer, or there are several valid
  approaches, call ask_clarification before acting; the run waits for the answer.
- When the task is done, answer with a short summary of what you did and where the results are."""


def system_prompt(soul: str | None) -> str:
    """The lead agent's prompt; with a SOUL, the prompt and the agent's ``<soul>`` block (fixed for the run)."""
    if not soul:
        return SYSTEM_PROMPT
    return f"{SYSTEM_PROMPT}\n\n<soul>\n{html.escape(soul, quote=False)}\n</soul>"
