"""DeerFlow's small Gateway routes (``bytedance/deer-flow: backend/app/gateway/routers/``) that the web app calls
beside the Agent Server API: input polish and follow-up suggestions (``workers/api/input_polish.py``,
``workers/api/suggestions.py``, answered by a worker's model), the feature flags (``workers/api/features.py``),
and the channels and integrations hartflow does not serve (``workers/api/channels.py``)."""

from __future__ import annotations

from fastapi import APIRouter

from workers.api import channels, features, input_polish, suggestions


def small_routers() -> list[APIRouter]:
    return [input_polish.router, suggestions.router, features.router, channels.router]
