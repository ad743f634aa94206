"""``hartflow serve`` alone: with no Temporal configured and nothing on the embedded port it starts the
embedded stack (dev server + worker) in-process, announces ``API: http://HOST:PORT`` once it answers, serves a
run to the official client, and stops cleanly on SIGTERM, taking its dev server with it."""

from __future__ import annotations

from pathlib import Path

from langgraph_sdk import get_client

from workers.config import load_config
from workers.devserver import free_port, port_answers
from workers.testing import answer, unique, write_script
from workers.testing.api_server import ApiServer, write_config


async def test_serve_alone_runs_the_embedded_stack(tmp_path: Path) -> None:
    embedded_port = free_port()
    config = load_config(
        overrides={
            "model": write_script(tmp_path, [answer("served")]),
            "storage": {"home": str(tmp_path / "home")},
            "temporal": {"embedded_port": embedded_port, "task_queue": unique("tq")},
        },
        environ={},
    )
    server = ApiServer(write_config(config, tmp_path))
    try:
        server.start()
        assert port_answers("127.0.0.1", embedded_port)
        sdk = get_client(url=server.url)
        assert (await sdk.assistants.get("hartflow"))["assistant_id"] == "hartflow"
        thread = await sdk.threads.create()
        final = await sdk.runs.wait(
            thread["thread_id"], "hartflow", input={"messages": [{"role": "user", "content": "hi"}]}
        )
        assert final["messages"][-1]["content"] == "served"
    finally:
        code = server.stop()
    assert code == 0, "".join(server.stderr)
    assert not port_answers("127.0.0.1", embedded_port)
