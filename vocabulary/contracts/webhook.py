"""A run's webhook: where its final view goes when the run ends, and the delivery activity's contract
(``activities/webhooks.py``; the delivery workflow: ``workflows/webhook.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from vocabulary.activity_ref import ActivityRef


@dataclass
class WebhookTarget:
    """The URL a run reports to; set by the client that starts the run (checked there, and again on delivery)."""

    url: str
    run_id: str | None = None
    """The client's id for the run (the Agent Server's API run): the body names it."""
    deadline_seconds: float = 3600.0
    """How long delivery keeps trying, from the first attempt (``webhooks.deadline_seconds``)."""


@dataclass
class WebhookDeliveryInput:
    """One POST: ``body`` (JSON text, built in workflow code) to ``url``; the worker signs it with its secret."""

    url: str
    body: str
    delivery_id: str
    """The same on every attempt (``X-Hartflow-Delivery``): a receiver that saw it already can drop a repeat."""
    deadline_seconds: float = 3600.0
    """How long the delivery workflow keeps trying (:attr:`WebhookTarget.deadline_seconds`)."""


@dataclass
class WebhookDelivered:
    status_code: int
    attempt: int


WEBHOOK_DELIVER = ActivityRef("webhook.deliver", WebhookDeliveryInput, WebhookDelivered)
"""POSTs a run's final view to its webhook (``activities/webhooks.py``): 2xx delivered, 5xx and network errors
retried, anything else (4xx, a redirect, a refused address) final."""

WEBHOOK_WORKFLOW = "HartflowWebhook"
