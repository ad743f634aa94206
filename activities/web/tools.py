"""The web tools a ``tools:`` entry can name, with the entry's settings applied: each a schema
(``vocabulary/web_tools.py``) and a coroutine of the model's arguments returning the tool's text.

Which one an entry gets is its ``use``: ``deerflow.community.ddg_search.tools:web_search_tool`` (DuckDuckGo, or
SearXNG with ``searxng_url``), ``deerflow.community.searxng.tools:web_search_tool`` (``base_url``),
``deerflow.community.image_search.tools:image_search_tool`` (DuckDuckGo, or SearXNG with ``searxng_url``) and any
provider's ``web_fetch_tool`` (hartflow fetches the page itself: ``activities/web/fetch.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from activities.web.fetch import FetchSettings, web_fetch
from activities.web.search import SearchSettings, ddg_web_search, image_search, searxng_web_search
from vocabulary.tools import ToolSpec
from vocabulary.web_tools import DDG_WEB_SEARCH, IMAGE_SEARCH, SEARXNG_WEB_SEARCH, WEB_FETCH

_COMMUNITY = "deerflow.community."
WEB_FETCH_ATTRIBUTE = "web_fetch_tool"


class _Args(BaseModel):
    model_config = ConfigDict(extra="ignore")


class SearchArgs(_Args):
    query: str
    max_results: int = Field(5, ge=1, le=50)


class ImageArgs(SearchArgs):
    size: str | None = None
    type_image: str | None = None
    layout: str | None = None


class FetchArgs(_Args):
    url: str


@dataclass(frozen=True)
class WebTool:
    spec: ToolSpec
    source: str
    run: Callable[[dict[str, Any]], Awaitable[str]]


def is_web_use(use: str) -> bool:
    return use.startswith(_COMMUNITY)


def web_tool(use: str, settings: dict[str, Any]) -> WebTool:
    """The web tool ``use`` names; ``ValueError`` for a ``deerflow.community`` tool hartflow does not have."""
    provider, _, attribute = use.removeprefix(_COMMUNITY).partition(".tools:")
    if attribute == WEB_FETCH_ATTRIBUTE:
        fetch = _fetch_settings(settings)
        return WebTool(WEB_FETCH, "web:fetch", lambda args: web_fetch(FetchArgs.model_validate(args).url, fetch))
    search = _search_settings(settings)
    if (provider, attribute) == ("ddg_search", "web_search_tool"):
        source = "web:searxng" if search.searxng_url else "web:ddg"
        return WebTool(DDG_WEB_SEARCH, source, lambda args: _ddg(SearchArgs.model_validate(args), search))
    if (provider, attribute) == ("searxng", "web_search_tool"):
        search = SearchSettings(**{**search.__dict__, "searxng_url": settings.get("base_url", search.searxng_url)})
        return WebTool(
            SEARXNG_WEB_SEARCH,
            "web:searxng",
            lambda args: searxng_web_search(SearchArgs.model_validate(args).query, search),
        )
    if (provider, attribute) == ("image_search", "image_search_tool"):
        source = "web:searxng" if search.searxng_url else "web:ddg"
        return WebTool(IMAGE_SEARCH, source, lambda args: _images(ImageArgs.model_validate(args), search))
    raise ValueError(
        f"{use!r} has no hartflow implementation: use deerflow.community.ddg_search.tools:web_search_tool, "
        "deerflow.community.searxng.tools:web_search_tool, deerflow.community.image_search.tools:image_search_tool "
        "or a web_fetch_tool"
    )


async def _ddg(args: SearchArgs, settings: SearchSettings) -> str:
    return await ddg_web_search(args.query, args.max_results, settings)


async def _images(args: ImageArgs, settings: SearchSettings) -> str:
    filters = {key: value for key in ("size", "type_image", "layout") if (value := getattr(args, key))}
    return await image_search(args.query, args.max_results, filters, settings)


def _search_settings(settings: dict[str, Any]) -> SearchSettings:
    known = {key: settings[key] for key in SearchSettings.__dataclass_fields__ if key in settings}
    if isinstance(known.get("backend"), list):
        known["backend"] = ",".join(str(part) for part in known["backend"])
    return SearchSettings(**known)


def _fetch_settings(settings: dict[str, Any]) -> FetchSettings:
    known = {key: settings[key] for key in FetchSettings.__dataclass_fields__ if key in settings}
    if "timeout" not in known and "timeout_s" in settings:  # Browserless's spelling
        known["timeout"] = settings["timeout_s"]
    return FetchSettings(**known)
