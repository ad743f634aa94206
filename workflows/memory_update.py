"""DeerFlow's memory updater, as pure functions the memory workflow replays: the prompt that asks a model to
update a user's memory from one conversation, and how its JSON answer is folded into the memory document
(``bytedance/deer-flow: backend/packages/harness/deerflow/agents/memory/prompt.py`` ``MEMORY_UPDATE_PROMPT`` and
``updater.py`` ``_apply_updates``).

Not reproduced: the correction/reinforcement hints (``{correction_hint}`` is left empty), staleness review and
consolidation, and the post-hoc scrubbing of upload mentions.
"""

from __future__ import annotations

import copy
import html
import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from vocabulary.contracts import MemoryUpdateSettings

MEMORY_UPDATE_PROMPT = """You are a memory management system. Your task is to analyze a conversation and update the user's memory profile.

Current Memory State:
<current_memory>
{current_memory}
</current_memory>

New Conversation to Process:
<conversation>
{conversation}
</conversation>

Instructions:
1. Analyze the conversation for important information about the user
2. Extract relevant facts, preferences, and context with specific details (numbers, names, technologies)
3. Update the memory sections as needed following the detailed length guidelines below

Before extracting facts, perform a structured reflection on the conversation:
1. Error/Retry Detection: Did the agent encounter errors, require retries, or produce incorrect results?
   If yes, record the root cause and correct approach as a high-confidence fact with category "correction".
2. User Correction Detection: Did the user correct the agent's direction, understanding, or output?
   If yes, record the correct interpretation or approach as a high-confidence fact with category "correction".
   Include what went wrong in "sourceError" only when category is "correction" and the mistake is explicit in the conversation.
3. Project Constraint Discovery: Were any project-specific constraints discovered during the conversation?
   If yes, record them as facts with the most appropriate category and confidence.

{correction_hint}

Memory Section Guidelines:

**User Context** (Current state - concise summaries):
- workContext: Professional role, company, key projects, main technologies (2-3 sentences)
  Example: Core contributor, project names with metrics (16k+ stars), technical stack
- personalContext: Languages, communication preferences, key interests (1-2 sentences)
  Example: Bilingual capabilities, specific interest areas, expertise domains
- topOfMind: Multiple ongoing focus areas and priorities (3-5 sentences, detailed paragraph)
  Example: Primary project work, parallel technical investigations, ongoing learning/tracking
  Include: Active implementation work, troubleshooting issues, market/research interests
  Note: This captures SEVERAL concurrent focus areas, not just one task

**History** (Temporal context - rich paragraphs):
- recentMonths: Detailed summary of recent activities (4-6 sentences or 1-2 paragraphs)
  Timeline: Last 1-3 months of interactions
  Include: Technologies explored, projects worked on, problems solved, interests demonstrated
- earlierContext: Important historical patterns (3-5 sentences or 1 paragraph)
  Timeline: 3-12 months ago
  Include: Past projects, learning journeys, established patterns
- longTermBackground: Persistent background and foundational context (2-4 sentences)
  Timeline: Overall/foundational information
  Include: Core expertise, longstanding interests, fundamental working style

**Facts Extraction**:
- Extract specific, quantifiable details (e.g., "16k+ GitHub stars", "200+ datasets")
- Include proper nouns (company names, project names, technology names)
- Preserve technical terminology and version numbers
- Categories:
  * preference: Tools, styles, approaches user prefers/dislikes
  * knowledge: Specific expertise, technologies mastered, domain knowledge
  * context: Background facts (job title, projects, locations, languages)
  * behavior: Working patterns, communication habits, problem-solving approaches
  * goal: Stated objectives, learning targets, project ambitions
  * correction: Explicit agent mistakes or user corrections, including the correct approach
- Confidence levels:
  * 0.9-1.0: Explicitly stated facts ("I work on X", "My role is Y")
  * 0.7-0.8: Strongly implied from actions/discussions
  * 0.5-0.6: Inferred patterns (use sparingly, only for clear patterns)

**What Goes Where**:
- workContext: Current job, active projects, primary tech stack
- personalContext: Languages, personality, interests outside direct work tasks
- topOfMind: Multiple ongoing priorities and focus areas user cares about recently (gets updated most frequently)
  Should capture 3-5 concurrent themes: main work, side explorations, learning/tracking interests
- recentMonths: Detailed account of recent technical explorations and work
- earlierContext: Patterns from slightly older interactions still relevant
- longTermBackground: Unchanging foundational facts about the user

**Multilingual Content**:
- Preserve original language for proper nouns and company names
- Keep technical terms in their original form (DeepSeek, LangGraph, etc.)
- Note language capabilities in personalContext

Output Format (JSON):
{{
  "user": {{
    "workContext": {{ "summary": "...", "shouldUpdate": true/false }},
    "personalContext": {{ "summary": "...", "shouldUpdate": true/false }},
    "topOfMind": {{ "summary": "...", "shouldUpdate": true/false }}
  }},
  "history": {{
    "recentMonths": {{ "summary": "...", "shouldUpdate": true/false }},
    "earlierContext": {{ "summary": "...", "shouldUpdate": true/false }},
    "longTermBackground": {{ "summary": "...", "shouldUpdate": true/false }}
  }},
  "newFacts": [
    {{ "content": "...", "category": "preference|knowledge|context|behavior|goal|correction", "confidence": 0.0-1.0 }}
  ],
  "factsToRemove": ["fact_id_1", "fact_id_2"]
}}

Important Rules:
- Only set shouldUpdate=true if there's meaningful new information
- Follow length guidelines: workContext/personalContext are concise (1-3 sentences), topOfMind and history sections are detailed (paragraphs)
- Include specific metrics, version numbers, and proper nouns in facts
- Only add facts that are clearly stated (0.9+) or strongly implied (0.7+)
- Use category "correction" for explicit agent mistakes or user corrections; assign confidence >= 0.95 when the correction is explicit
- Include "sourceError" only for explicit correction facts when the prior mistake or wrong approach is clearly stated; omit it otherwise
- Remove facts that are contradicted by new information
- When updating topOfMind, integrate new focus areas while removing completed/abandoned ones
  Keep 3-5 concurrent focus themes that are still active and relevant
- For history sections, integrate new information chronologically into appropriate time period
- Preserve technical accuracy - keep exact names of technologies, companies, projects
- Focus on information useful for future interactions and personalization
- IMPORTANT: Do NOT record file upload events in memory. Uploaded files are
  session-specific and ephemeral — they will not be accessible in future sessions.
  Recording upload events causes confusion in subsequent conversations.

Return ONLY valid JSON, no explanation or markdown."""  # noqa: E501

MESSAGE_MAX_CHARS = 1000
USER_SECTIONS = ("workContext", "personalContext", "topOfMind")
HISTORY_SECTIONS = ("recentMonths", "earlierContext", "longTermBackground")
_REQUIRED_KEYS = frozenset({"user", "history", "newFacts", "factsToRemove"})
_UPLOAD_BLOCK = re.compile(r"<uploaded_files>[\s\S]*?</uploaded_files>\n*")


class MemoryUpdateError(ValueError):
    """The model's answer holds no usable memory update."""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = [p if isinstance(p, str) else p.get("text") for p in content if isinstance(p, str | dict)]
    return " ".join(p for p in parts if isinstance(p, str))


def format_conversation(messages: Sequence[BaseMessage]) -> str:
    """``User: …`` / ``Assistant: …`` turns, each cut to 1000 characters and escaped so the conversation cannot
    close the ``<conversation>`` block it is embedded in."""
    lines = []
    for message in messages:
        content = _text(message.content)
        if isinstance(message, HumanMessage):
            content = _UPLOAD_BLOCK.sub("", content).strip()
            if not content:
                continue
        if len(content) > MESSAGE_MAX_CHARS:
            content = content[:MESSAGE_MAX_CHARS] + "..."
        content = html.escape(content, quote=False)
        if isinstance(message, HumanMessage):
            lines.append(f"User: {content}")
        elif isinstance(message, AIMessage):
            lines.append(f"Assistant: {content}")
    return "\n\n".join(lines)


def update_prompt(memory: dict[str, Any], messages: Sequence[BaseMessage]) -> str:
    current = html.escape(json.dumps(memory, indent=2, ensure_ascii=False), quote=False)
    return MEMORY_UPDATE_PROMPT.format(
        current_memory=current, conversation=format_conversation(messages), correction_hint=""
    )


def parse_update(text: str) -> dict[str, Any]:
    """The first JSON object in ``text`` with the four update keys (models wrap JSON in prose or fences)."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            parsed, _ = decoder.raw_decode(text[match.start() :])
        except json.JSONDecodeError:
            continue
        if isinstance(parsed, dict) and parsed.keys() >= _REQUIRED_KEYS:
            return parsed
    raise MemoryUpdateError("no memory update JSON object in the model's answer")


def _list(value: Any) -> list[Any]:
    """A list the model (or a hand-edited file) was supposed to give; anything else counts as empty."""
    return value if isinstance(value, list) else []


def _confidence(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        confidence = float(value)
    except ValueError:
        return None
    return confidence if math.isfinite(confidence) else None


def apply_update(
    memory: dict[str, Any],
    update: dict[str, Any],
    *,
    now: str,
    new_id: Callable[[], str],
    source: str,
    settings: MemoryUpdateSettings,
) -> dict[str, Any]:
    """``memory`` with ``update`` folded in (a new document; ``memory`` is not changed)."""
    result: dict[str, Any] = copy.deepcopy(memory)
    for group, sections in (("user", USER_SECTIONS), ("history", HISTORY_SECTIONS)):
        raw_changes = update.get(group)
        changes: dict[str, Any] = raw_changes if isinstance(raw_changes, dict) else {}
        target = result.get(group)
        if not isinstance(target, dict):
            target = result[group] = {}
        for name in sections:
            change = changes.get(name)
            if isinstance(change, dict) and change.get("shouldUpdate") and change.get("summary"):
                target[name] = {"summary": str(change["summary"]), "updatedAt": now}

    removed = {i for i in _list(update.get("factsToRemove")) if isinstance(i, str)}
    facts = [f for f in _list(result.get("facts")) if isinstance(f, dict) and f.get("id") not in removed]
    known = {str(f.get("content", "")).strip().casefold() for f in facts}
    for raw in _list(update.get("newFacts")):
        if not isinstance(raw, dict) or not isinstance(raw.get("content"), str):
            continue
        content, confidence = raw["content"].strip(), _confidence(raw.get("confidence", 0.5))
        if not content or confidence is None or confidence < settings.fact_confidence_threshold:
            continue
        if content.casefold() in known:
            continue
        category = raw.get("category")
        fact: dict[str, Any] = {
            "id": f"fact_{new_id()}",
            "content": content,
            "category": category.strip() if isinstance(category, str) and category.strip() else "context",
            "confidence": confidence,
            "createdAt": now,
            "source": source,
        }
        source_error = raw.get("sourceError")
        if fact["category"] == "correction" and isinstance(source_error, str) and source_error.strip():
            fact["sourceError"] = source_error.strip()
        facts.append(fact)
        known.add(content.casefold())
    if len(facts) > settings.max_facts:
        facts = sorted(facts, key=lambda f: _confidence(f.get("confidence")) or 0.0, reverse=True)[: settings.max_facts]
    result["facts"] = facts
    result["lastUpdated"] = now
    return result
