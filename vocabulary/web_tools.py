"""The web tools as DeerFlow's models see them (``deerflow.community``: ``ddg_search``, ``searxng``,
``image_search`` and the ``web_fetch`` tools): names, descriptions and argument schemas, exactly as LangChain's
``@tool(parse_docstring=True)`` renders DeerFlow's functions, pinned in ``tests/builtin_tool_schemas.json``.

hartflow runs its own implementations of them (``activities/web/``); which one a ``tools:`` entry gets is decided
by its ``use`` (``activities/configured_tools/build.py``).
"""

from __future__ import annotations

from typing import Any

from vocabulary.tools import ToolSpec


def _optional_text(description: str) -> dict[str, Any]:
    return {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "description": description}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"properties": properties, "required": required, "type": "object"}


DDG_WEB_SEARCH = ToolSpec(
    "web_search",
    "Search the web for information. Use this tool to find current information, news, articles, and facts from "
    "the internet.",
    _object(
        {
            "query": {
                "description": "Search keywords describing what you want to find. Be specific for better results.",
                "type": "string",
            },
            "max_results": {
                "default": 5,
                "description": "Maximum number of results to return. Default is 5.",
                "type": "integer",
            },
        },
        ["query"],
    ),
)

SEARXNG_WEB_SEARCH = ToolSpec(
    "web_search",
    "Search the web using SearXNG.",
    _object({"query": {"description": "The query to search for.", "type": "string"}}, ["query"]),
)

IMAGE_SEARCH = ToolSpec(
    "image_search",
    "Search for images online. Use this tool BEFORE image generation to find reference images for characters, "
    "portraits, objects, scenes, or any content requiring visual accuracy. **When to use:**\n"
    "- Before generating character/portrait images: search for similar poses, expressions, styles\n"
    "- Before generating specific objects/products: search for accurate visual references\n"
    "- Before generating scenes/locations: search for architectural or environmental references\n"
    "- Before generating fashion/clothing: search for style and detail references The returned image URLs can "
    "be used as reference images in image generation to significantly improve quality.",
    _object(
        {
            "query": {
                "description": "Search keywords describing the images you want to find. Be specific for better "
                'results (e.g., "Japanese woman street photography 1990s" instead of just "woman").',
                "type": "string",
            },
            "max_results": {
                "default": 5,
                "description": "Maximum number of images to return. Default is 5.",
                "type": "integer",
            },
            "size": _optional_text(
                'Image size filter. Options: "Small", "Medium", "Large", "Wallpaper". Use "Large" for reference images.'
            ),
            "type_image": _optional_text(
                'Image type filter. Options: "photo", "clipart", "gif", "transparent", "line". Use "photo" for '
                "realistic references."
            ),
            "layout": _optional_text(
                'Layout filter. Options: "Square", "Tall", "Wide". Choose based on your generation needs.'
            ),
        },
        ["query"],
    ),
)

WEB_FETCH = ToolSpec(
    "web_fetch",
    "Fetch the contents of a web page at a given URL.\n"
    "Only fetch EXACT URLs that have been provided directly by the user or have been returned in results from the "
    "web_search and web_fetch tools.\n"
    "This tool can NOT access content that requires authentication, such as private Google Docs or pages behind "
    "login walls.\n"
    "Do NOT add www. to URLs that do NOT have them.\n"
    "URLs must include the schema: https://example.com is a valid URL while example.com is an invalid URL.",
    _object({"url": {"description": "The URL to fetch the contents of.", "type": "string"}}, ["url"]),
)

WEB_TOOLS: tuple[ToolSpec, ...] = (DDG_WEB_SEARCH, SEARXNG_WEB_SEARCH, IMAGE_SEARCH, WEB_FETCH)
"""Every web tool schema hartflow can offer, in the order ``tests/builtin_tool_schemas.json`` pins them."""
