"""The webhook delivery workflow: one per run that names a webhook, started by the run as it ends
(``workflows/run/webhook.py``) and abandoned by it, so the run's completion never waits on the receiver.

    webhook.deliver (activity)   retried with backoff for network errors and 5xx, up to the target's deadline
                                 final on 4xx, a redirect or a refused address: the workflow fails with it

Being a workflow, a delivery outlives the run, the worker that started it and the API server: a worker killed
mid-delivery leaves the attempt to time out and the next worker to try again. Its id (``{run workflow id}.webhook.
{run id}``) makes the start idempotent, and every attempt carries the same delivery id.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

from vocabulary.contracts import WEBHOOK_DELIVER, WEBHOOK_WORKFLOW, WebhookDelivered, WebhookDeliveryInput

ATTEMPT_TIMEOUT = timedelta(seconds=30)
"""One attempt: the POST's own timeout (10 s on the worker) and the address check, with room."""
RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), backoff_coefficient=2.0, maximum_interval=timedelta(minutes=1)
)


@workflow.defn(name=WEBHOOK_WORKFLOW)
class WebhookWorkflow:
    @workflow.run
    async def run(self, delivery: WebhookDeliveryInput) -> WebhookDelivered:
        workflow.set_current_details(f"**Webhook:** {delivery.url}")
        delivered: WebhookDelivered = await workflow.execute_activity(
            WEBHOOK_DELIVER,
            delivery,
            result_type=WEBHOOK_DELIVER.output,
            summary="POST the run's final view to its webhook",
            start_to_close_timeout=ATTEMPT_TIMEOUT,
            schedule_to_close_timeout=timedelta(seconds=delivery.deadline_seconds),
            retry_policy=RETRY,
        )
        return delivered
