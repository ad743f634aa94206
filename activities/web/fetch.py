"""``web_fetch``: one page over HTTP, its readable text as markdown, in DeerFlow's output format
(``# {title}\\n\\n{markdown}``, cut to 4096 characters, as ``deerflow.community.jina_ai.tools.web_fetch_tool``
returns it). hartflow fetches the page itself instead of through Jina's reader: no third party sees the URL and
no key is needed.

Hostile pages are bounded: the whole fetch (every redirect hop, a response that trickles in) has one deadline
(``timeout``, DeerFlow's key, default 10 s); at most ``max_bytes`` of a body are read (the rest is dropped, the
text of what was read still extracted); redirects are followed by hand, at most ``max_redirects``, each hop's URL
checked by ``activities/web/url_safety.py``. Readable text comes from trafilatura (boilerplate such as menus and
footers removed; links kept). Failures the model can act on are ``Error: ...`` answers, as DeerFlow's are.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from urllib.parse import urljoin

import httpx
import trafilatura

from activities.web.url_safety import Resolver, resolve_host, url_refusal

OUTPUT_MAX_CHARS = 4096
NO_CONTENT = "No content could be extracted from this page"
USER_AGENT = "Mozilla/5.0 (compatible; hartflow web_fetch)"
_TEXT_TYPES = ("text/plain", "text/markdown", "application/json", "text/csv")


@dataclass(frozen=True)
class FetchSettings:
    timeout: float = 10
    max_bytes: int = 5 * 1024 * 1024
    max_redirects: int = 5
    allow_private_addresses: bool = False
    proxy: str | None = None
    trust_env: bool = True


@dataclass(frozen=True)
class _Page:
    url: str
    content_type: str
    body: bytes
    encoding: str


async def web_fetch(url: str, settings: FetchSettings, *, resolver: Resolver = resolve_host) -> str:
    try:
        async with asyncio.timeout(settings.timeout):
            page = await _fetch(url, settings, resolver)
    except TimeoutError:
        return f"Error: Fetching {url} took longer than {settings.timeout:g} seconds"
    except httpx.HTTPError as exc:
        return f"Error: Request to {url} failed: {type(exc).__name__}: {exc}"
    if isinstance(page, str):
        return page
    return (await asyncio.to_thread(readable_markdown, page))[:OUTPUT_MAX_CHARS]


async def _fetch(url: str, settings: FetchSettings, resolver: Resolver) -> _Page | str:
    current = url
    async with httpx.AsyncClient(
        follow_redirects=False, timeout=settings.timeout, proxy=settings.proxy, trust_env=settings.trust_env
    ) as client:
        for _ in range(settings.max_redirects + 1):
            refusal = url_refusal(current, allow_private_addresses=settings.allow_private_addresses, resolver=resolver)
            if refusal is not None:
                return refusal
            async with client.stream("GET", current, headers={"User-Agent": USER_AGENT}) as response:
                if response.is_redirect and "location" in response.headers:
                    current = urljoin(current, response.headers["location"])
                    continue
                if response.status_code >= 400:
                    return f"Error: {current} answered HTTP {response.status_code}"
                body = await _read_at_most(response, settings.max_bytes)
                content_type = response.headers.get("content-type", "text/html").split(";")[0].strip().lower()
                return _Page(current, content_type, body, response.encoding or "utf-8")
    return f"Error: Too many redirects (more than {settings.max_redirects}) fetching {url}"


async def _read_at_most(response: httpx.Response, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk[: limit - size])
        size += len(chunks[-1])
        if size >= limit:
            break
    return b"".join(chunks)


def readable_markdown(page: _Page) -> str:
    text = page.body.decode(page.encoding, errors="replace")
    if page.content_type in _TEXT_TYPES:
        return f"# {page.url}\n\n{text}"
    if "html" not in page.content_type and "xml" not in page.content_type:
        return f"Error: {page.url} is {page.content_type}, not a web page"
    markdown = trafilatura.extract(
        text, output_format="markdown", include_links=True, include_formatting=True, url=page.url
    )
    metadata = trafilatura.extract_metadata(text)
    title = (metadata.title if metadata is not None else None) or "Untitled"
    return f"# {title}\n\n{markdown.strip() if markdown and markdown.strip() else NO_CONTENT}"
