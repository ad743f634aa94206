"""A run request's ``webhook`` (LangGraph's field on ``runs.create``, ``stream``, ``wait``), checked before anything
is written (``workers/client/webhooks.py``): a URL a run may not report to is 422.

A request that answers a paused run (``command.resume``, or a message on an interrupted thread) names no webhook
of its own: the run reports to the one it started with.
"""

from __future__ import annotations

from fastapi import HTTPException

from activities.webhook_urls import WebhookUrlError
from vocabulary.contracts import WebhookTarget
from workers.client.webhooks import webhook_target
from workers.webhook_settings import WebhookSettings


async def run_webhook(settings: WebhookSettings, requested: str | None) -> WebhookTarget | None:
    """Where a new API run reports its end (``None``: nowhere); 422 for a URL it may not use."""
    try:
        return await webhook_target(settings, requested, None)
    except WebhookUrlError as exc:
        raise HTTPException(422, str(exc)) from None


def refuse_on_reply(requested: str | None) -> None:
    """A reply resumes a run that has its webhook (or none) already: naming another one is a conflict, 422."""
    if requested is not None:
        raise HTTPException(
            422, "webhook: this request answers a paused run, which reports to the webhook it started with"
        )
