"""The one data converter of every hartflow client and worker: pydantic JSON plus the claim check.

A reference in history can only be read by a converter with the driver that wrote it, so the CLI, the worker,
the embedded stack, the demo and the test helpers all build their client's converter here.
"""

from __future__ import annotations

import dataclasses

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter

from activities.storage.payloads import external_storage
from workers.config import HartflowConfig, open_object_store
from workers.converter import HartflowPayloadConverter


def data_converter_for(config: HartflowConfig) -> DataConverter:
    """``pydantic_data_converter`` with payloads of ``storage.payload_threshold_bytes`` or more stored in the
    configured backend (``{home}/payloads/`` or ``s3://{bucket}/{prefix}payloads/``)."""
    storage = external_storage(open_object_store(config), config.storage.payload_threshold_bytes)
    return dataclasses.replace(
        pydantic_data_converter, payload_converter_class=HartflowPayloadConverter, external_storage=storage
    )


def client_for(client: Client, config: HartflowConfig) -> Client:
    """``client`` with ``config``'s converter: the same connection, namespace, plugins and interceptors (a
    time-skipping test server's client keeps skipping time)."""
    options = client.config()
    options["data_converter"] = data_converter_for(config)
    return Client(**options)
