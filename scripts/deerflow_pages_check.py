"""A manual check of every page of DeerFlow's web app against ``hartflow serve``, in headless Chromium: which of the
app's requests to the server fail (not run in CI: it needs DeerFlow's frontend built from its public source).

1. ``hartflow serve --port API`` with a scripted model whose first agent entry answers with text containing
   ``scripted answer`` (and entries ``"for": "title"`` / ``"for": "suggestions"`` so those calls have answers);
2. build DeerFlow's frontend (``../shared/tools/deerflow-frontend/build.sh``) and start it proxying to
   ``http://127.0.0.1:API`` with ``NEXT_PUBLIC_BACKEND_BASE_URL=http://127.0.0.1:API`` in its environment (the
   app's ``/api/memory`` route handlers proxy there, not through the rewrites ``start.sh`` retargets);
3. ``python scripts/deerflow_pages_check.py http://127.0.0.1:FRONTEND_PORT OUT_DIR``.

It opens each page (new chat, every Settings section, Agents, New Agent, Scheduled tasks), then sends a message,
waits for the answer, reloads, regenerates the answer, renames the chat and branches it. It prints every response
of the server that was 4xx/5xx with the page that asked, every toast, each step's outcome, and the totals
(``N of M /api responses 4xx/5xx``); screenshots go to OUT_DIR. It exits 1 when a step failed or a response did.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page, Response, async_playwright

PAGES = [
    "/workspace/chats/new",
    *(f"/workspace/chats/new?settings={section}" for section in ("memory", "tools", "skills", "channels")),
    *(f"/workspace/chats/new?settings={section}" for section in ("integrations", "about")),
    "/workspace/agents",
    "/workspace/agents/new",
    "/workspace/scheduled-tasks",
]
_STEP_MS = 30_000


class Check:
    def __init__(self, page: Page, out: Path) -> None:
        self.page, self.out = page, out
        self.where, self.seen = "", 0
        self.failed: list[str] = []
        self.toasts: list[str] = []
        self.steps: dict[str, str] = {}
        page.on("response", self.record)

    def record(self, response: Response) -> None:
        if "/api/" not in response.url:
            return
        self.seen += 1
        if response.status >= 400:
            self.failed.append(f"{self.where}: {response.status} {response.request.method} {response.url}")

    async def settle(self, quiet_ms: int = 4000) -> None:
        """Until the page's requests have stopped (the app polls nothing on these pages), then a moment more for
        its renders and toasts."""
        with contextlib.suppress(PlaywrightError):  # a page that never idles is still checked
            await self.page.wait_for_load_state("networkidle", timeout=_STEP_MS)
        await self.page.wait_for_timeout(quiet_ms)
        self.toasts += [
            f"{self.where}: {text}" for text in await self.page.locator("[data-sonner-toast]").all_inner_texts()
        ]

    async def step(self, name: str, action: Callable[[], Awaitable[None]]) -> None:
        self.where = name
        try:
            await action()
            await self.settle()
            self.steps[name] = "ok"
        except (PlaywrightError, KeyError) as exc:  # a failed step is reported, the others still run
            self.steps[name] = f"FAILED: {str(exc).splitlines()[0][:200]}"
        await self.page.screenshot(path=self.out / f"{name.replace(' ', '-')}.png", full_page=True)


async def check(app: str, out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        page = await browser.new_page()
        run = Check(page, out)
        for path in PAGES:
            run.where = path
            await page.goto(app + path)
            await run.settle()
        chat: dict[str, str] = {}

        async def send() -> None:
            await page.goto(app + "/workspace/chats/new")
            box = page.locator("textarea").first
            await box.fill("hello from the check")
            await box.press("Enter")
            await page.get_by_text("scripted answer").first.wait_for(timeout=_STEP_MS)
            chat["url"] = page.url

        async def reload() -> None:
            await page.goto(chat["url"])
            await page.get_by_text("scripted answer").first.wait_for(timeout=_STEP_MS)

        async def regenerate() -> None:
            await page.get_by_text("scripted answer").last.hover()
            await page.get_by_role("button", name="Regenerate").last.click(timeout=_STEP_MS)

        async def rename() -> None:
            thread_id = chat["url"].rsplit("/", 1)[-1]
            item = page.locator("[data-sidebar='menu-item']", has=page.locator(f"a[href*='{thread_id}']")).first
            await item.hover()
            await item.get_by_role("button").last.click(timeout=_STEP_MS)
            await page.get_by_role("menuitem", name="Rename").click(timeout=_STEP_MS)
            await page.get_by_placeholder("Rename").fill("Renamed by the check")
            await page.get_by_role("button", name="Save").click(timeout=_STEP_MS)
            await page.get_by_text("Renamed by the check").first.wait_for(timeout=_STEP_MS)

        async def branch() -> None:
            await page.get_by_text("scripted answer").last.hover()
            await page.get_by_role("button", name="Branch conversation").last.click(timeout=_STEP_MS)

        for name, action in (("send", send), ("reload", reload), ("regenerate", regenerate)):
            await run.step(name, action)
        for name, action in (("rename", rename), ("branch", branch)):
            await run.step(name, action)
        await browser.close()
    for line in run.failed:
        print(line)
    for toast in run.toasts:
        print(f"toast {toast}")
    for name, outcome in run.steps.items():
        print(f"step {name}: {outcome}")
    print(f"{len(run.failed)} of {run.seen} /api responses 4xx/5xx")
    return 1 if run.failed or any(outcome != "ok" for outcome in run.steps.values()) else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(check(sys.argv[1].rstrip("/"), Path(sys.argv[2]))))
