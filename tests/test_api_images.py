"""Images in a run's message (issue 27): the blocks Agent Chat UI attaches (``src/lib/multimodal-utils.ts``:
``{type: image, mimeType, data}``, submitted by ``src/components/thread/index.tsx`` ``handleSubmit``) and
OpenAI's ``image_url`` data URLs reach a vision model as content blocks, are stored as the thread's uploads and
never committed as base64; a model without vision, and blocks the server does not read, are a 422 with nothing
written.

Real uvicorn, Temporal and storage, ``langgraph-sdk``; the model is scripted and its inputs read from history."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import UnprocessableEntityError
from temporalio.client import Client

from middlewares.view_image import is_image_context
from tests.support import thread_state
from vocabulary.contracts import MODEL_INVOKE, ModelCallInput
from vocabulary.workflow_ids import run_workflow_id
from workers.config import HartflowConfig
from workers.testing import answer, make_config, running_worker, serving_api, unique, write_script
from workers.testing.history import history_events, scheduled_inputs
from workers.worker import connect

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
ENCODED = base64.b64encode(PNG).decode()


def with_image(text: str, block: dict[str, Any]) -> dict[str, Any]:
    return {"id": unique("msg"), "type": "human", "content": [{"type": "text", "text": text}, block]}


AGENT_CHAT_UI_IMAGE = {"type": "image", "mimeType": "image/png", "data": ENCODED, "metadata": {"name": "chart.png"}}


def config_for(home: Path, temporal_address: str, tmp_path: Path, *, vision: bool) -> HartflowConfig:
    return make_config(
        home,
        temporal_address,
        model=write_script(tmp_path, [answer("a bar chart")]),
        run={"model_capabilities": {"vision": vision}},
    )


@pytest.fixture
async def vision_url(home: Path, temporal_address: str, tmp_path: Path, client: Client) -> AsyncIterator[str]:
    config = config_for(home, temporal_address, tmp_path, vision=True)
    async with running_worker(client, config), serving_api(config, await connect(config)) as base:
        yield base


def uploads(home: Path) -> list[Path]:
    return sorted(p for p in home.rglob("uploads/*") if p.is_file())


@pytest.mark.parametrize(
    "block",
    [AGENT_CHAT_UI_IMAGE, {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{ENCODED}"}}],
    ids=["agent-chat-ui", "image_url"],
)
async def test_a_vision_model_sees_the_image_and_the_state_keeps_only_its_path(
    vision_url: str, home: Path, client: Client, block: dict[str, Any]
) -> None:
    sdk = get_client(url=vision_url)
    thread_id = (await sdk.threads.create())["thread_id"]
    final = await sdk.runs.wait(thread_id, "hartflow", input={"messages": [with_image("what is this?", block)]})
    assert final["messages"][-1]["content"] == "a bar chart"
    assert final["messages"][0]["content"] == "what is this?"  # as typed: the uploads envelope is the model's

    handle = client.get_workflow_handle(run_workflow_id("default", thread_id))
    (model_call,) = await scheduled_inputs(client, await history_events(handle), MODEL_INVOKE, ModelCallInput)
    shown = [m for m in model_call.messages if is_image_context(m)]
    assert shown and {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{ENCODED}"}} in shown[0].content

    (stored,) = uploads(home)
    assert stored.read_bytes() == PNG and stored.name.startswith("image-") and stored.suffix == ".png"
    state = thread_state(home, thread_id)
    assert ENCODED not in json.dumps(state)
    (sent,) = [m for m in state["messages"] if m["type"] == "human" and not m["additional_kwargs"].get("hide_from_ui")]
    assert sent["additional_kwargs"]["attached_images"] == [f"/mnt/user-data/uploads/{stored.name}"]
    assert "what is this?" in json.dumps(sent["content"])


async def test_a_model_without_vision_refuses_the_image_and_writes_nothing(
    home: Path, temporal_address: str, tmp_path: Path, client: Client
) -> None:
    config = config_for(home, temporal_address, tmp_path, vision=False)
    async with serving_api(config, client) as base:
        sdk = get_client(url=base)
        thread_id = (await sdk.threads.create())["thread_id"]
        with pytest.raises(UnprocessableEntityError, match="cannot see images"):
            await sdk.runs.create(thread_id, "hartflow", input={"messages": [with_image("look", AGENT_CHAT_UI_IMAGE)]})
        refused = {
            "remote URL": {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
            "not base64": {"type": "image", "mimeType": "image/png", "data": "%%%"},
            "not an image": {"type": "image", "mimeType": "image/png", "data": base64.b64encode(b"hello").decode()},
            "a PDF": {
                "type": "file",
                "mimeType": "application/pdf",
                "data": ENCODED,
                "metadata": {"filename": "a.pdf"},
            },
        }
        for why, block in refused.items():
            with pytest.raises(UnprocessableEntityError):
                await sdk.runs.create(thread_id, "hartflow", input={"messages": [with_image("look", block)]})
            assert (await sdk.threads.get(thread_id))["status"] == "idle", why
        assert await sdk.runs.list(thread_id) == [] and uploads(home) == []
