"""A manual check of LangChain's Agent Chat UI against ``hartflow serve``, in headless Chromium (not run in CI: it
needs the app built from its public source, ``langchain-ai/agent-chat-ui``, by ``../shared/tools/agent-chat-ui/``).

1. ``hartflow serve --port API`` with a scripted model whose agent entry answers with text containing
   ``scripted answer``;
2. ``../shared/tools/agent-chat-ui/start.sh APP_DIR PORT http://127.0.0.1:API``;
3. ``python scripts/agent_chat_ui_check.py http://127.0.0.1:PORT DEPLOYMENT_URL OUT_DIR``, once with
   DEPLOYMENT_URL = ``http://127.0.0.1:API`` (the browser calls the server: CORS) and once with
   ``http://127.0.0.1:PORT/api`` (the app's own proxy, which sends JSON without a JSON ``Content-Type``).

It sends a message and waits for the answer, regenerates it (the answer's Refresh button: a rerun from the
checkpoint before it) and edits the question (a fork from the checkpoint before the question), checking that each
shows a second branch (``2 / 2``). It prints every failed request and console error and exits 1 on any, or when a
step did not happen; screenshots go to OUT_DIR.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from urllib.parse import quote

from playwright.async_api import async_playwright

_STEP_MS = 30_000


async def check(app: str, deployment: str, out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    failed: list[str] = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        page = await browser.new_page()
        page.on(
            "response", lambda r: failed.append(f"{r.status} {r.request.method} {r.url}") if r.status >= 400 else None
        )
        page.on("requestfailed", lambda r: failed.append(f"failed {r.method} {r.url}: {r.failure}"))
        page.on("console", lambda m: failed.append(f"console: {m.text[:300]}") if m.type == "error" else None)
        await page.goto(f"{app}/?apiUrl={quote(deployment, safe='')}&assistantId=hartflow")

        box = page.get_by_placeholder("Type your message...")
        await box.fill("hello from the check")
        await box.press("Enter")
        await page.get_by_text("scripted answer").first.wait_for(timeout=_STEP_MS)
        await page.screenshot(path=out / "1-answer.png", full_page=True)

        await page.get_by_text("scripted answer").last.hover()
        await page.get_by_role("button", name="Refresh").last.click(timeout=_STEP_MS)
        await page.get_by_text("2 / 2").first.wait_for(timeout=_STEP_MS)
        await page.screenshot(path=out / "2-regenerated.png", full_page=True)

        await page.get_by_text("hello from the check").last.hover()
        await page.get_by_role("button", name="Edit").last.click(timeout=_STEP_MS)
        await page.locator("textarea").first.fill("an edited question")
        await page.get_by_role("button", name="Submit").last.click(timeout=_STEP_MS)
        await page.get_by_text("an edited question").last.wait_for(timeout=_STEP_MS)
        await page.get_by_text("scripted answer").last.wait_for(timeout=_STEP_MS)
        await page.screenshot(path=out / "3-edited.png", full_page=True)
        print(f"ok: {page.url}")
        await browser.close()
    for line in failed:
        print(line)
    print(f"{len(failed)} failed requests or console errors")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(check(sys.argv[1].rstrip("/"), sys.argv[2].rstrip("/"), Path(sys.argv[3]))))
