"""``web_search`` and ``image_search`` on two backends a new user can run without a key: DuckDuckGo through the
``ddgs`` package (the default, as in DeerFlow's example config) and any SearXNG-compatible endpoint (``GET
{base_url}/search?format=json``, a self-hosted instance). The answers are DeerFlow's JSON text for the tool the
entry's ``use`` names (``deerflow.community.ddg_search``, ``.searxng``, ``.image_search``), so prompts written
for DeerFlow read them unchanged.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import httpx

SEARXNG_DEFAULT_URL = "http://localhost:8088"
NO_DDGS_RESULTS = "No results found."
IMAGE_USAGE_HINT = "Use the 'image_url' values as reference images in image generation. Download them first if needed."


@dataclass(frozen=True)
class SearchSettings:
    max_results: int | None = None
    """Overrides the model's ``max_results`` (DeerFlow: the config's value wins)."""
    backend: str = "auto"
    """DDGS' own backends (``auto``, ``duckduckgo``, ``brave``, ...)."""
    region: str = "wt-wt"
    safesearch: str = "moderate"
    searxng_url: str | None = None
    """Search this SearXNG-compatible endpoint instead of DuckDuckGo."""
    timeout: float = 30


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


async def ddg_web_search(query: str, max_results: int, settings: SearchSettings) -> str:
    """DeerFlow's ``ddg_search`` answer: ``{query, total_results, results: [{title, url, content}]}``."""
    limit = settings.max_results or max_results
    if settings.searxng_url:
        raw = await searxng(settings.searxng_url, query, limit, timeout=settings.timeout)
        results = [{"title": r.get("title", ""), "url": r.get("url", ""), "content": r.get("content", "")} for r in raw]
    else:
        raw = await asyncio.to_thread(_ddgs, "text", query, limit, settings, {})
        results = [
            {
                "title": r.get("title", ""),
                "url": r.get("href", r.get("link", "")),
                "content": r.get("body", r.get("snippet", "")),
            }
            for r in raw
        ]
    if not results:
        return json.dumps({"error": "No results found", "query": query}, ensure_ascii=False)
    return _dumps({"query": query, "total_results": len(results), "results": results})


async def searxng_web_search(query: str, settings: SearchSettings) -> str:
    """DeerFlow's ``searxng`` answer: a list of ``{title, url, snippet}``; a failure is ``{error, query}``."""
    try:
        raw = await searxng(settings.searxng_url or SEARXNG_DEFAULT_URL, query, settings.max_results or 5)
    except httpx.HTTPError as exc:
        return json.dumps({"error": str(exc) or type(exc).__name__, "query": query}, ensure_ascii=False)
    return _dumps(
        [{"title": r.get("title", ""), "url": r.get("url", ""), "snippet": r.get("content", "")} for r in raw]
    )


async def image_search(query: str, max_results: int, filters: dict[str, str], settings: SearchSettings) -> str:
    """DeerFlow's ``image_search`` answer: ``{query, total_results, results: [{title, image_url, thumbnail_url}],
    usage_hint}``. ``filters``: ``size``, ``type_image``, ``layout`` (DDGS' image filters)."""
    limit = settings.max_results or max_results
    if settings.searxng_url:
        raw = await searxng(settings.searxng_url, query, limit, categories="images", timeout=settings.timeout)
        results = [
            {
                "title": r.get("title", ""),
                "image_url": r.get("img_src", ""),
                "thumbnail_url": r.get("thumbnail_src", ""),
            }
            for r in raw
        ]
    else:
        raw = await asyncio.to_thread(_ddgs, "images", query, limit, settings, filters)
        results = [
            {"title": r.get("title", ""), "image_url": r.get("image", ""), "thumbnail_url": r.get("thumbnail", "")}
            for r in raw
        ]
    if not results:
        return json.dumps({"error": "No images found", "query": query}, ensure_ascii=False)
    return _dumps({"query": query, "total_results": len(results), "results": results, "usage_hint": IMAGE_USAGE_HINT})


async def searxng(
    base_url: str, query: str, max_results: int, *, categories: str | None = None, timeout: float = 30
) -> list[dict[str, Any]]:
    params: dict[str, Any] = {"q": query, "format": "json", "language": "auto", "pageno": 1, "limit": max_results}
    if categories:
        params["categories"] = categories
    async with httpx.AsyncClient(timeout=timeout) as client:
        response = await client.get(
            f"{base_url.rstrip('/')}/search", params=params, headers={"Accept": "application/json"}
        )
        response.raise_for_status()
        results = response.json().get("results", [])
    return [r for r in results if isinstance(r, dict)][:max_results]


def _ddgs(kind: str, query: str, max_results: int, settings: SearchSettings, filters: dict[str, str]) -> list[Any]:
    """A DDGS search; an engine failure is an exception (Temporal's retry policy, then ToolErrorHandling), not
    DeerFlow's silent empty answer."""
    from ddgs import DDGS  # imported here: the worker loads it only when a run searches DuckDuckGo
    from ddgs.exceptions import DDGSException

    engine = DDGS(timeout=int(settings.timeout))
    options: dict[str, Any] = {"region": settings.region, "safesearch": settings.safesearch}
    try:
        if kind == "text":
            found = engine.text(query, max_results=max_results, backend=settings.backend, **options)
        else:
            found = engine.images(query, max_results=max_results, **options, **filters)
    except DDGSException as exc:
        if str(exc) == NO_DDGS_RESULTS:  # every engine answered, none found anything
            return []
        raise
    return [r for r in found or [] if isinstance(r, dict)]
