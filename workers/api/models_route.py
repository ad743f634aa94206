"""``GET /api/models``: the configured models in the shape DeerFlow's model picker reads.

``{models: [{name, model, display_name, description, supports_thinking, supports_reasoning_effort,
supports_vision}], token_usage: {enabled}}`` (``bytedance/deer-flow: backend/app/gateway/routers/models.py``,
``ModelsListResponse``). A run names its model by ``name`` (``context.model_name``).

A config with a ``models`` list serves it as ``workers.models.api_models`` renders it; a config with only the
``model:`` shorthand serves that one model (:func:`configured_models`), a scripted model without its path, with
the capabilities ``run.model_capabilities`` gives it (``thinking``, ``reasoning_effort``, ``vision``: DeerFlow's
app offers its Reasoning, Pro and Ultra modes only for a model that supports thinking). ``token_usage.enabled``
is the TokenUsage middleware's switch (``run.middlewares.token_usage.enabled``, DeerFlow's ``token_usage``):
what the app's token counter and ``GET /threads/{id}/token-usage`` (``workers/api/token_usage.py``) show.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends

from workers.api.deps import ApiContext, api
from workers.config import HartflowConfig
from workers.models import api_models

router = APIRouter()


def configured_models(config: HartflowConfig) -> list[dict[str, Any]]:
    """The models a run may name: the single ``model`` spec as one entry (none when no model is set).

    A scripted model is listed as ``scripted``: its script path is a detail of the server, never shown."""
    if not config.model:
        return []
    provider, _, rest = config.model.partition(":")
    model = "scripted" if provider == "scripted" else rest
    capabilities = config.run.model_capabilities
    return [
        {
            "name": model,
            "model": model,
            "display_name": model if provider == "scripted" else f"{model} ({provider})",
            "description": "the server's default model",
            "supports_thinking": capabilities.thinking,
            "supports_reasoning_effort": capabilities.reasoning_effort,
            "supports_vision": capabilities.vision,
        }
    ]


@router.get("/models")
async def list_models(context: Annotated[ApiContext, Depends(api)]) -> dict[str, Any]:
    if context.config.models:
        return api_models(context.config)
    token_usage = {"enabled": context.config.run.middlewares.token_usage.enabled}
    return {"models": configured_models(context.config), "token_usage": token_usage}
