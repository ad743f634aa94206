"""The ``webhook.deliver`` activity: one signed POST of a run's final view to its webhook.

Before every attempt the host is resolved and every address it has is checked (``activities/webhook_urls.py``);
the request then goes to the address that was checked (the URL's host name stays the ``Host`` header and the TLS
server name), so a name that resolves elsewhere between the check and the connection reaches nothing new.
Redirects are not followed.

Signature: ``X-Hartflow-Signature: sha256=HEX``, the HMAC-SHA256 under the worker's ``webhooks.secret`` of
``"{X-Hartflow-Timestamp}.{body}"`` (the timestamp: Unix seconds of this attempt). The secret is read on the
worker and never enters a run's history. Outcomes: 2xx delivered; 5xx, 408, 429 and network errors raise a
retryable error (the delivery workflow's retry policy backs off); any other status, a redirect or a refused
address raise a non-retryable one.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import socket
import time
from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.contract import implements
from activities.webhook_urls import Network, WebhookUrlError, refused_address, split_url
from vocabulary.contracts import WEBHOOK_DELIVER, WebhookDelivered, WebhookDeliveryInput

SIGNATURE_HEADER = "X-Hartflow-Signature"
TIMESTAMP_HEADER = "X-Hartflow-Timestamp"
DELIVERY_HEADER = "X-Hartflow-Delivery"
_RETRIED_STATUSES = {408, 429}


def signature(secret: str, timestamp: str, body: str) -> str:
    """The value of :data:`SIGNATURE_HEADER` for ``body`` sent at ``timestamp`` (what a receiver recomputes)."""
    digest = hmac.new(secret.encode(), f"{timestamp}.{body}".encode(), hashlib.sha256).hexdigest()
    return f"sha256={digest}"


class WebhookActivities:
    """Deliveries signed with ``secret`` (unsigned when ``None``) to addresses the guard lets through."""

    def __init__(self, secret: str | None, allowed: Iterable[Network], *, timeout_seconds: float = 10.0) -> None:
        self._secret = secret
        self._allowed = list(allowed)
        self._timeout = timeout_seconds

    @implements(WEBHOOK_DELIVER)
    async def deliver(self, input: WebhookDeliveryInput) -> WebhookDelivered:
        try:
            scheme, host, port = split_url(input.url)
        except WebhookUrlError as exc:
            raise ApplicationError(str(exc), type="WebhookRefused", non_retryable=True) from None
        address = await self._checked_address(host, port)
        timestamp = str(int(time.time()))
        headers = {"Content-Type": "application/json", TIMESTAMP_HEADER: timestamp, DELIVERY_HEADER: input.delivery_id}
        if self._secret:
            headers[SIGNATURE_HEADER] = signature(self._secret, timestamp, input.body)
        parts = urlsplit(input.url)
        headers["Host"] = parts.netloc.rsplit("@", 1)[-1]
        pinned = f"[{address}]" if ":" in address else address
        url = urlunsplit((scheme, f"{pinned}:{port}", parts.path or "/", parts.query, ""))
        async with httpx.AsyncClient(follow_redirects=False, timeout=self._timeout, trust_env=False) as client:
            try:
                response = await client.post(
                    url, content=input.body.encode(), headers=headers, extensions={"sni_hostname": host}
                )
            except httpx.TransportError as exc:
                raise ApplicationError(f"webhook unreachable: {exc!r}", type="WebhookUnreachable") from None
        code = response.status_code
        attempt = activity.info().attempt
        if 200 <= code < 300:
            return WebhookDelivered(code, attempt)
        reason = f"webhook answered {code}: {response.text[:200]!r}"
        if code >= 500 or code in _RETRIED_STATUSES:
            raise ApplicationError(reason, type="WebhookServerError")
        raise ApplicationError(reason, type="WebhookRejected", non_retryable=True)

    async def _checked_address(self, host: str, port: int) -> str:
        """The address to connect to: the first the host resolves to, once every one passed the guard."""
        try:
            found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:  # a name that does not resolve now may later (DNS outage): retried
            reason = f"webhook host {host!r} does not resolve: {exc}"
            raise ApplicationError(reason, type="WebhookUnreachable") from None
        addresses = [str(entry[4][0]) for entry in found]
        refused = refused_address(addresses, self._allowed)
        if refused is not None:
            raise ApplicationError(
                f"webhook host {host!r} resolves to {refused}, a private, loopback or reserved address; "
                "allow its network in webhooks.allow_networks to send there",
                type="WebhookRefused",
                non_retryable=True,
            )
        return addresses[0]
