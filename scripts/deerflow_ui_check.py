"""A manual check of DeerFlow's own web app against ``hartflow serve``, in headless Chromium (not run in CI: it
needs DeerFlow's frontend built from its public source, ``bytedance/deer-flow: frontend/``).

1. ``hartflow serve --port API`` with a scripted model that asks ``ask_clarification`` with the options ``red``
   and ``blue`` ("Which colour?"), then answers ``Blue it is: painted.``;
2. build DeerFlow's frontend and start it proxying ``/api/*`` to ``http://127.0.0.1:API``;
3. ``python scripts/deerflow_ui_check.py http://127.0.0.1:FRONTEND_PORT``.

It opens a new chat, sends a message, waits for the question card, picks ``blue``, waits for the answer, reloads
the page (the app rejoins the thread from the server) and waits for the answer again; screenshots go to the
current directory. It exits non-zero at the first step that does not happen.
"""

from __future__ import annotations

import asyncio
import sys

from playwright.async_api import async_playwright

_TIMEOUT_MS = 60_000


async def check(url: str) -> None:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        page = await browser.new_page()
        await page.goto(f"{url}/workspace/chats/new", wait_until="networkidle", timeout=2 * _TIMEOUT_MS)
        box = page.locator("textarea").first
        await box.fill("Paint the wall")
        await box.press("Enter")
        await page.get_by_text("Which colour?").first.wait_for(timeout=_TIMEOUT_MS)
        await page.screenshot(path="deerflow-1-question.png")
        await page.get_by_text("blue", exact=True).first.click()
        await page.get_by_text("Blue it is: painted.").first.wait_for(timeout=_TIMEOUT_MS)
        await page.screenshot(path="deerflow-2-answer.png")
        await page.reload(wait_until="networkidle")
        await page.get_by_text("Blue it is: painted.").first.wait_for(timeout=_TIMEOUT_MS)
        await page.screenshot(path="deerflow-3-reloaded.png")
        print(f"ok: {page.url}")
        await browser.close()


if __name__ == "__main__":
    asyncio.run(check(sys.argv[1]))
