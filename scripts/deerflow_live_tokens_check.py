"""A manual check that DeerFlow's web app shows a streamed answer growing, against ``hartflow serve``, in headless
Chromium (not run in CI: it needs DeerFlow's frontend built from its public source).

1. ``hartflow serve --port API`` with a scripted model whose first agent entry streams slowly, e.g.
   ``{"content": "word0 … word29 done", "chunks": ["word0 ", …, "word29 ", "done"], "chunk_delay": 0.3}``;
2. DeerFlow's frontend proxying to it (see ``scripts/deerflow_pages_check.py``);
3. ``python scripts/deerflow_live_tokens_check.py http://127.0.0.1:FRONTEND_PORT``.

It sends a message, reads the page twice while the model is still generating (once the first words show, and
again two seconds later) and once at the end, and prints how many ``wordN`` pieces each reading showed. It exits 1
unless the second reading shows more than the first and the first fewer than the final answer.
"""

from __future__ import annotations

import asyncio
import re
import sys

from playwright.async_api import async_playwright

_STEP_MS = 60_000
_PIECE = re.compile(r"word\d+")


async def check(app: str) -> int:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        page = await browser.new_page()
        await page.goto(f"{app}/workspace/chats/new", timeout=_STEP_MS)
        box = page.locator("textarea").first
        await box.fill("stream please")
        await box.press("Enter")
        await page.get_by_text("word3").first.wait_for(timeout=_STEP_MS)
        first = len(_PIECE.findall(await page.locator("body").inner_text()))
        await page.wait_for_timeout(2000)
        second = len(_PIECE.findall(await page.locator("body").inner_text()))
        await page.get_by_text("done").last.wait_for(timeout=_STEP_MS)
        final = len(_PIECE.findall(await page.locator("body").inner_text()))
        await browser.close()
    print(f"pieces shown: {first} while generating, {second} two seconds later, {final} at the end")
    return 0 if first < second and first < final else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(check(sys.argv[1].rstrip("/"))))
