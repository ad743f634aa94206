"""SkillActivation: ``/skill-name …`` typed by the user puts that skill's SKILL.md in front of the model.

Hook
* ``wrap_model_call``: the latest real user message (its ``original_user_content`` when Uploads or input
  sanitisation wrapped it) is parsed with DeerFlow's grammar ``^/([a-z0-9]+(?:-[a-z0-9]+)*)(?:\\s+|$)``;
  reserved names (``bootstrap, goal, help, memory, models, new, status``) are never skills. The ``skills.load``
  activity checks the skill and reads its SKILL.md. A skill that is not installed, disabled, not available to
  this agent or unreadable is answered with DeerFlow's AIMessage and the model is not called. Otherwise a
  hidden ``HumanMessage(id=X__slash_activation)`` carrying the ``<slash_skill_activation>`` envelope (every
  interpolation HTML-escaped; the skill's category, sandbox path and sha256) is inserted before the user's
  message ``X`` for this call only.

The envelope is request-only, so the tool loop's next model call would activate again: the activation is
remembered for the run (DeerFlow's run-context key) and later calls skip it once the activation call has been
answered; a call before that (a retry of the activation call) gets the remembered envelope again.

Writes: request overlay; per-run memory (the activation, which SkillToolPolicy reads: ``active_skill_path``); reads
the skills directory through an activity.

Parts: the contract ``vocabulary/contracts/skills.py`` (``SKILL_LOAD``) and its activity
``activities/skill_catalog.py`` (the skills folder: ``activities/skills.py``, a user's own:
``activities/user_skills.py``); ``hartflow skills`` (``workers/cli/skills.py``) and Settings → Skills
(``workers/api/skills_route.py``) list, turn on and off, install and delete what it loads. Helpers:
``middlewares/_messages.py``. Tests: ``tests/test_skill_activation.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import html
import re
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from pydantic import BaseModel, ConfigDict, Field

from middlewares._activity_call import call_activity
from middlewares._logging import hook_logger
from middlewares._messages import HIDE_FROM_UI_KEY, is_real_user_message, original_user_text
from middlewares.base import Middleware, ModelHandler, ModelRequest
from middlewares.context import ActivityOptions
from vocabulary.contracts import SKILL_LOAD, SkillLoadInput

logger = hook_logger(__name__)

SLASH_SKILL = re.compile(r"^/([a-z0-9]+(?:-[a-z0-9]+)*)(?:\s+|$)")
RESERVED_NAMES = frozenset({"bootstrap", "goal", "help", "memory", "models", "new", "status"})
ACTIVATION_KEY = "slash_skill_activation"
ACTIVATION_TARGET_KEY = "slash_skill_activation_target_id"
ACTIVATION_SUFFIX = "__slash_activation"
NO_TASK_TEXT = (
    "No additional task text was provided after the slash skill command. "
    "Ask the user what they want to do with this skill if the next step is unclear."
)
FAILURES = {
    "not_installed": "Skill `/{name}` is not installed.",
    "disabled": "Skill `/{name}` is installed but disabled. Enable it before using slash activation.",
    "not_available": "Skill `/{name}` is not available for this agent.",
    "unreadable": "Skill `/{name}` could not be loaded safely. Please check the skill installation.",
}


class SkillActivationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    available_skills: list[str] | None = Field(
        default=None, description="skills this agent may activate (DeerFlow's agent skills list); null: all"
    )


@dataclass(frozen=True)
class SlashCommand:
    name: str
    remaining_text: str


@dataclass(frozen=True)
class Activation:
    name: str
    category: str
    path: str
    content: str
    sha256: str
    remaining_text: str


def parse_slash_command(text: str) -> SlashCommand | None:
    match = SLASH_SKILL.match(text)
    if match is None or match.group(1) in RESERVED_NAMES:
        return None
    return SlashCommand(match.group(1), text[match.end() :].lstrip())


def activation_envelope(activation: Activation) -> str:
    """DeerFlow's ``<slash_skill_activation>`` block, character for character."""
    request = html.escape(activation.remaining_text or NO_TASK_TEXT, quote=False)
    name = html.escape(activation.name, quote=True)
    category = html.escape(activation.category, quote=True)
    path = html.escape(activation.path, quote=True)
    sha256 = html.escape(activation.sha256, quote=True)
    editable = "true" if activation.category == "custom" else "false"
    return (
        "<slash_skill_activation>\n"
        f"The user explicitly activated the `{name}` skill for this turn.\n"
        f"Treat the task text as:\n<user_request>\n{request}\n</user_request>\n"
        "\n"
        "Follow this skill before choosing a general workflow. "
        "Load supporting resources from the same skill directory only when needed.\n"
        "\n"
        f'<skill name="{name}" category="{category}" path="{path}" sha256="{sha256}" editable="{editable}">\n'
        '<skill_content encoding="xml-escaped">\n'
        f"{html.escape(activation.content, quote=False)}\n"
        "</skill_content>\n"
        "</skill>\n"
        "</slash_skill_activation>"
    )


def is_activation_message(message: BaseMessage) -> bool:
    return isinstance(message, HumanMessage) and bool(message.additional_kwargs.get(ACTIVATION_KEY))


def run_key(target: BaseMessage) -> str:
    """Identifies the slash message: its id, or a digest of its text when it has none."""
    if target.id:
        return str(target.id)
    return "sha256:" + hashlib.sha256(original_user_text(target).encode("utf-8")).hexdigest()


class SkillActivationMiddleware(Middleware):
    def __init__(self, config: SkillActivationConfig | None = None) -> None:
        self.config = config or SkillActivationConfig()
        self._activated: tuple[str, Activation] | None = None
        """(run key, activation) of this run's slash command."""

    @property
    def active_skill_path(self) -> str | None:
        """The SKILL.md path of this run's slash activation (SkillToolPolicy applies its ``allowed-tools``)."""
        return self._activated[1].path if self._activated is not None else None

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> AIMessage:
        messages = list(request.messages)
        index = next((i for i in range(len(messages) - 1, -1, -1) if is_real_user_message(messages[i])), None)
        if index is None or _already_activated(messages, index):
            return await handler(request)
        target, key = messages[index], run_key(messages[index])
        if self._activated is not None and self._activated[0] == key:
            if any(isinstance(m, AIMessage) for m in messages[index + 1 :]):
                return await handler(request)  # answered: the tool loop goes on without the envelope
            activation = self._activated[1]
        else:
            command = parse_slash_command(original_user_text(target))
            if command is None:
                return await handler(request)
            loaded = await call_activity(
                request.ctx,
                SKILL_LOAD,
                SkillLoadInput(command.name, self.config.available_skills, request.ctx.user_id),
                summary=f"SkillActivation.wrap_model_call · load /{command.name}",
                options=ActivityOptions(local=True),
            )
            if loaded.status != "loaded":
                logger.info("SkillActivation: /%s refused (%s)", command.name, loaded.status)
                return AIMessage(FAILURES[loaded.status].format(name=command.name), id=request.ctx.uuid())
            activation = Activation(
                name=command.name,
                category=loaded.category,
                path=loaded.container_path,
                content=loaded.content,
                sha256=loaded.sha256,
                remaining_text=command.remaining_text,
            )
            self._activated = (key, activation)
            logger.info("SkillActivation: activating /%s (%s, sha256 %s)", command.name, activation.path, loaded.sha256)
            request.ctx.emit("skill_activated", skill=activation.name, path=activation.path, sha256=activation.sha256)
        envelope = HumanMessage(
            activation_envelope(activation),
            id=f"{target.id}{ACTIVATION_SUFFIX}",
            additional_kwargs={HIDE_FROM_UI_KEY: True, ACTIVATION_KEY: True, ACTIVATION_TARGET_KEY: target.id},
        )
        return await handler(request.override(messages=[*messages[:index], envelope, *messages[index:]]))

    def export_memory(self) -> dict[str, Any] | None:
        if self._activated is None:
            return None
        key, activation = self._activated
        return {"run_key": key, "activation": dataclasses.asdict(activation)}

    def import_memory(self, memory: dict[str, Any]) -> None:
        self._activated = (memory["run_key"], Activation(**memory["activation"]))


def _already_activated(messages: list[BaseMessage], index: int) -> bool:
    """An activation envelope for this target already precedes it (some outer middleware kept one)."""
    target_id = messages[index].id
    for previous in messages[:index]:
        if is_activation_message(previous) and (
            previous.additional_kwargs.get(ACTIVATION_TARGET_KEY) == target_id
            or previous.id == f"{target_id}{ACTIVATION_SUFFIX}"
        ):
            return True
    return index > 0 and is_activation_message(messages[index - 1])
