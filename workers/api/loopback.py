"""``api.auth: none`` means "whoever is on this machine": the request checks that keep it that way.

Binding a loopback address is not enough on its own. A web page the user visits can reach a loopback server from
the browser: through DNS rebinding (``evil.example`` resolves to 127.0.0.1, so the page reads the API as its own
origin) or with a cross-site form or ``fetch`` that writes (a multipart upload needs no preflight). So with auth
``none`` every request must

- come from a loopback client address (after uvicorn applied ``X-Forwarded-For`` from a trusted local proxy, so a
  proxy on this host does not publish the API to its own clients),
- name a loopback ``Host`` (``localhost``, ``127.x.x.x``, ``[::1]``, any port): a rebinding page sends its own
  name, and
- if it changes anything (any method but GET, HEAD, OPTIONS), carry no ``Origin`` but a loopback one
  (``http://localhost:3000``: DeerFlow's web app, LangChain's Agent Chat UI on another local port keep working)
  or one ``api.cors_origins`` allows (``workers/api/cors.py``: the operator let that page call), and, with no
  ``Origin`` at all, no ``Sec-Fetch-Site: cross-site``.

With ``bearer`` or ``jwt`` none of this applies: a browser never attaches a bearer token by itself (it is not a
cookie), and a cross-site page cannot set ``Authorization`` or ``x-api-key`` without a CORS preflight this server
does not grant, so the token is the CSRF defence; and those servers sit behind proxies with any host name.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

_LOOPBACK_NAMES = frozenset({"localhost"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def is_loopback(host: str) -> bool:
    """``host`` (a name or an address, IPv6 with or without brackets) is this machine's loopback."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def host_of_authority(authority: str) -> str | None:
    """The host of a ``Host`` header value (``name[:port]``, ``[v6][:port]``), or None when it is malformed."""
    if authority.startswith("["):
        host, bracket, rest = authority[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return host
    host, colon, port = authority.rpartition(":")
    if not colon:
        return authority
    return host if port.isdigit() and ":" not in host else None


def refusal(
    scope: Mapping[str, Any], headers: Mapping[bytes, bytes], may_write: Callable[[str], bool] | None = None
) -> str | None:
    """Why this request may not reach an ``api.auth: none`` server, or None when it may; ``may_write``: which
    ``Origin`` may change things (by default the loopback ones)."""
    client = scope.get("client")
    if not client or not is_loopback(str(client[0])):
        return "api.auth is 'none': only clients on this machine may call (the client address is not loopback)"
    authority = headers.get(b"host", b"").decode("latin-1").strip()
    host = host_of_authority(authority)
    if not host or not is_loopback(host):
        shown = authority[:80] or "(none)"
        return f"api.auth is 'none': the Host header must be localhost, 127.x.x.x or [::1], not {shown!r}"
    if scope.get("method", "GET") in SAFE_METHODS:
        return None
    origin = headers.get(b"origin")
    if origin is not None:
        text = origin.decode("latin-1").strip()
        if not (may_write or loopback_origin)(text):
            return f"api.auth is 'none': cross-site write refused (Origin {text[:80]!r} is not an allowed origin)"
        return None
    if headers.get(b"sec-fetch-site", b"").strip().lower() == b"cross-site":
        return "api.auth is 'none': cross-site write refused (Sec-Fetch-Site: cross-site)"
    return None


def loopback_origin(origin: str) -> bool:
    """``origin`` is an http(s) origin on this machine's loopback (any port)."""
    try:
        parts = urlsplit(origin)
        host = parts.hostname
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and host is not None and is_loopback(host)
