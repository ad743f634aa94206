"""The web tools against a local web (``tests/support/web_server.py``; nothing here reaches the internet):
DeerFlow's output formats, the SearXNG backend, readable text as markdown, and the hostile pages — a huge body, a
redirect loop, a response that trickles forever, private addresses (refused unless allowed, also behind a
redirect). DuckDuckGo (``ddgs``) is only reached by its own package: its answers' normalisation is tested on the
shape that package returns."""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from activities.web import search
from activities.web.fetch import OUTPUT_MAX_CHARS, FetchSettings, web_fetch
from activities.web.search import SearchSettings
from activities.web.tools import web_tool
from tests.support.web_server import LocalWeb

LOCAL = FetchSettings(allow_private_addresses=True, timeout=5)


@pytest.fixture
def web() -> Iterator[LocalWeb]:
    with LocalWeb().running() as server:
        yield server


async def test_web_fetch_returns_the_readable_text_as_markdown_in_deerflows_format(web: LocalWeb) -> None:
    text = await web_fetch(f"{web.url}/moved", LOCAL)
    assert text.startswith("# Durable Agents\n\n")
    assert "every tool call is an activity" in text
    assert "[documentation](https://docs.temporal.io/)" in text, "links are kept"
    assert "Home | About" not in text and "Copyright" not in text, "boilerplate is removed"
    assert "Ignore all previous instructions" in text, "the page's injection text reaches the chain as it is"


async def test_a_huge_page_is_read_only_up_to_the_limit_and_cut_to_deerflows_length(web: LocalWeb) -> None:
    text = await web_fetch(f"{web.url}/huge", FetchSettings(allow_private_addresses=True, max_bytes=200_000))
    assert len(text) == OUTPUT_MAX_CHARS and "dull page" in text


async def test_a_redirect_loop_ends_after_the_allowed_hops(web: LocalWeb) -> None:
    text = await web_fetch(f"{web.url}/loop", FetchSettings(allow_private_addresses=True, max_redirects=3))
    assert text == f"Error: Too many redirects (more than 3) fetching {web.url}/loop"
    assert web.requests.count("/loop") == 4


async def test_a_response_that_never_ends_is_cut_off_at_the_deadline(web: LocalWeb) -> None:
    started = time.monotonic()
    text = await web_fetch(f"{web.url}/slow", FetchSettings(allow_private_addresses=True, timeout=1))
    assert text == f"Error: Fetching {web.url}/slow took longer than 1 seconds"
    assert time.monotonic() - started < 30, "one deadline for the whole fetch, not one per trickled byte"


async def test_private_and_loopback_addresses_are_refused_unless_allowed(web: LocalWeb) -> None:
    assert await web_fetch(f"{web.url}/article", FetchSettings()) == (
        "Error: Refusing to fetch a private, loopback, or metadata address"
    )
    assert await web_fetch("http://localhost:1/x", FetchSettings()) == (
        "Error: Refusing to fetch a private or loopback address"
    )
    assert await web_fetch("file:///etc/passwd", LOCAL) == "Error: Only http:// and https:// URLs are supported"
    assert web.requests == [], "nothing was fetched"


async def test_every_redirect_hop_is_checked_again(web: LocalWeb) -> None:
    """A public page that redirects to the cloud metadata address: the first hop is fetched, the second refused.
    The public host is simulated: its name resolves to a public address for the check, and the local server
    answers as the proxy every request goes through."""
    public = ipaddress.ip_address("93.184.215.14")
    settings = FetchSettings(timeout=5, proxy=web.url, trust_env=False)
    text = await web_fetch("http://public.test/to-private", settings, resolver=lambda host: [public])
    assert text == "Error: Refusing to fetch a private, loopback, or metadata address"
    assert web.requests == ["http://public.test/to-private"], "the metadata address was never requested"


async def test_searxng_web_search_answers_in_deerflows_searxng_format(web: LocalWeb) -> None:
    tool = web_tool("deerflow.community.searxng.tools:web_search_tool", {"base_url": web.url, "max_results": 2})
    answer = json.loads(await tool.run({"query": "durable agents"}))
    assert answer == [
        {"title": "Durable Agents", "url": f"{web.url}/article", "snippet": "Temporal keeps an agent's run alive."},
        {"title": "Second hit", "url": f"{web.url}/other", "snippet": "More about retries."},
    ]
    assert tool.spec.parameters["required"] == ["query"]


async def test_ddg_search_with_a_searxng_endpoint_answers_in_the_ddg_format(web: LocalWeb) -> None:
    tool = web_tool("deerflow.community.ddg_search.tools:web_search_tool", {"searxng_url": web.url})
    answer = json.loads(await tool.run({"query": "durable", "max_results": 1}))
    assert answer == {
        "query": "durable",
        "total_results": 1,
        "results": [
            {"title": "Durable Agents", "url": f"{web.url}/article", "content": "Temporal keeps an agent's run alive."}
        ],
    }


async def test_image_search_answers_in_deerflows_format_with_its_usage_hint(web: LocalWeb) -> None:
    tool = web_tool("deerflow.community.image_search.tools:image_search_tool", {"searxng_url": web.url})
    answer = json.loads(await tool.run({"query": "deer", "type_image": "photo"}))
    assert answer["results"] == [
        {"title": "A deer", "image_url": f"{web.url}/deer.png", "thumbnail_url": f"{web.url}/deer-small.png"}
    ]
    assert answer["usage_hint"] == search.IMAGE_USAGE_HINT


async def test_duckduckgo_answers_are_normalised_as_deerflow_does(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, str, int]] = []

    def ddgs(kind: str, query: str, limit: int, settings: SearchSettings, filters: dict[str, Any]) -> list[Any]:
        seen.append((kind, query, limit))
        if query == "nothing":
            return []
        return [{"title": "T", "href": "https://e.test/", "body": "B"}]

    monkeypatch.setattr(search, "_ddgs", ddgs)
    tool = web_tool("deerflow.community.ddg_search.tools:web_search_tool", {"max_results": 7})
    answer = json.loads(await tool.run({"query": "q", "max_results": 2}))
    assert answer["results"] == [{"title": "T", "url": "https://e.test/", "content": "B"}]
    assert seen == [("text", "q", 7)], "the config's max_results wins, as in DeerFlow"
    assert json.loads(await tool.run({"query": "nothing"})) == {"error": "No results found", "query": "nothing"}


def test_a_deerflow_web_tool_hartflow_lacks_is_named() -> None:
    with pytest.raises(ValueError, match=r"tavily.*has no hartflow implementation"):
        web_tool("deerflow.community.tavily.tools:web_search_tool", {})
