"""The Temporal Web UI reads like the pipeline: Playwright drives Debian's Chromium against a dev server with the
UI, on runs started the way ``hartflow run`` starts them.

Needs ``/usr/bin/chromium`` (Debian's ``chromium`` package; Playwright's own browser download is not used). It
takes a screenshot of a paused run; with ``WEBUI_SCREENSHOT=docs/webui-paused-run.png`` it refreshes the
README's (otherwise it goes to the test's temporary directory and the tree stays clean).
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, async_playwright
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from workers.cli import run_command
from workers.config import HartflowConfig
from workers.devserver import DevServer, free_port
from workers.devserver_options import DevServerOptions
from workers.testing import answer, calls, make_config, running_worker, tool_call, unique, write_script

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOT_ENV = "WEBUI_SCREENSHOT"
# The recipe that works headless on these machines (no GPU, no sandbox namespace, no background traffic).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def ui_server() -> Iterator[DevServer]:
    server = DevServer(DevServerOptions(port=free_port(), ui_port=free_port(), ui=True))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    assert CHROMIUM.exists(), "Debian's Chromium is missing: apt-get install -y chromium"
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield chromium
        await chromium.close()


async def _hartflow(
    capsys: pytest.CaptureFixture[str], config: HartflowConfig, directory: Path, *argv: str
) -> tuple[int, dict[str, Any]]:
    """``hartflow ARGV --json`` in this process (the test's worker runs the run); exit code and output."""
    config_file = directory / f"{unique('hartflow')}.yaml"
    config_file.write_text(config.model_dump_json(), encoding="utf-8")  # JSON is YAML
    capsys.readouterr()
    code = await asyncio.to_thread(run_command, [*argv, "--config", str(config_file), "--json"])
    output: dict[str, Any] = json.loads(capsys.readouterr().out)
    return code, output


async def _frames_text(page: Page, needle: str) -> str:
    """The UI renders summaries and details as markdown inside iframes: wait until one of them shows ``needle``,
    then return the text of all of them."""
    await page.wait_for_function(
        """needle => Array.from(document.querySelectorAll('iframe'))
               .some(f => (f.contentDocument?.body?.innerText || '').includes(needle))""",
        arg=needle,
    )
    texts = [await frame.inner_text("body") for frame in page.frames[1:]]
    return "\n".join(texts)


async def test_the_web_ui_shows_summaries_the_paused_filter_and_the_pending_question(
    ui_server: DevServer, browser: Browser, home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = make_config(home, ui_server.address)
    client = await Client.connect(ui_server.address, data_converter=pydantic_data_converter)
    done_thread, paused_thread = unique("listing"), unique("colours")
    listing = write_script(home, [calls(tool_call("bash", "b1", command="ls -la /mnt/user-data")), answer("Listed.")])
    asking = write_script(
        home,
        [
            calls(tool_call("write_file", "w1", path="/mnt/user-data/workspace/room.txt", content="walls: white")),
            calls(
                tool_call(
                    "ask_clarification",
                    "ask1",
                    question="Which colour should the living room be?",
                    clarification_type="approach_choice",
                    context="The walls are white today; the sofa is dark blue.",
                    options=["Warm sand", "Sage green", "Deep navy"],
                )
            ),
            answer("never"),
        ],
    )
    async with running_worker(client, config):
        code, done = await _hartflow(
            capsys, config, tmp_path, "run", "list my files", "--thread", done_thread, "--model", listing
        )
        assert code == 0
        code, paused = await _hartflow(
            capsys, config, tmp_path, "run", "Paint the living room", "--thread", paused_thread, "--model", asking
        )
        assert code == 3

        base = f"{ui_server.ui_url}/namespaces/default/workflows"
        page = await browser.new_page(viewport={"width": 1440, "height": 960})
        page.set_default_timeout(30_000)

        # A completed run: its event history names every step the way the pipeline does.
        await page.goto(f"{base}/{urllib.parse.quote(done['workflow_id'], safe='')}/{done['run_id']}/history")
        model_label = f"model scripted:{Path(listing.removeprefix('scripted:')).name}"
        for summary in (
            f"{model_label} · turn 1",
            "tool bash · ls -la /mnt/user-data",
            f"{model_label} · turn 2",
            "commit thread state, archive the run",
        ):
            await page.get_by_text(summary, exact=True).first.wait_for()

        # The runs waiting on a person: the HartflowStatus filter finds the paused run and only it.
        query = urllib.parse.quote('HartflowStatus="awaiting_input"')
        await page.goto(f"{base}?query={query}")
        paused_link = page.get_by_role("link", name=paused["workflow_id"])
        await paused_link.wait_for()
        assert await page.get_by_role("link", name=done["workflow_id"]).count() == 0

        # The paused run: the question and its options are in the current details.
        await paused_link.click()
        await page.get_by_text("User Metadata").first.click()
        details = await _frames_text(page, "Which colour should the living room be?")
        assert "Status: awaiting_input · turn 2" in details
        assert "Last tool: write_file · /mnt/user-data/workspace/room.txt" in details
        for option in ("Warm sand", "Sage green", "Deep navy"):
            assert option in details
        assert "Paint the living room" in details  # the static summary, from hartflow run
        screenshot = Path(os.environ.get(SCREENSHOT_ENV) or tmp_path / "webui-paused-run.png").resolve()
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(screenshot), full_page=True)
        await page.close()
    assert screenshot.read_bytes().startswith(b"\x89PNG")
