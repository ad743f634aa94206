"""Per-middleware configuration, one field per middleware that has settings (the ``middlewares:`` key of
``hartflow.yaml``). Each middleware module defines its own config model; this class only gathers them so
that an unknown key or a bad value is an error that names it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class MiddlewareSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
