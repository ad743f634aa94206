"""The webhook a new run reports its end to, checked the same way by every client that starts runs (the Agent
Server's ``webhook`` field: ``workers/api/webhooks.py``; ``hartflow run --webhook``): an ``http``/``https`` URL
whose host resolves, now, only to addresses a webhook may reach (``activities/webhook_urls.py``;
``webhooks.allow_networks`` opens private ones). The worker checks again before every attempt
(``activities/webhooks.py``): what a name resolves to may change. Unset, a run takes ``webhooks.default_url``.
"""

from __future__ import annotations

import asyncio
import socket

from activities.webhook_urls import WebhookUrlError, refused_address, split_url
from vocabulary.contracts import WebhookTarget
from workers.webhook_settings import WebhookSettings


async def webhook_target(settings: WebhookSettings, requested: str | None, run_id: str | None) -> WebhookTarget | None:
    """Where a new run reports its end (``None``: nowhere); :class:`WebhookUrlError` for a URL it may not use."""
    url = requested or settings.default_url
    if url is None:
        return None
    _, host, port = split_url(url)
    try:
        found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        raise WebhookUrlError(f"webhook: the host {host!r} does not resolve") from None
    refused = refused_address([str(entry[4][0]) for entry in found], settings.networks())
    if refused is not None:
        raise WebhookUrlError(
            f"webhook: {host!r} resolves to {refused}, a private, loopback or reserved address "
            "(webhooks.allow_networks opens a network)"
        )
    return WebhookTarget(url, run_id=run_id, deadline_seconds=settings.deadline_seconds)
