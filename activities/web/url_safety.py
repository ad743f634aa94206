"""Which URLs a server-side web tool may reach: http(s) only, and no private, loopback, link-local, reserved,
multicast or unspecified address (cloud metadata endpoints among them) unless ``allow_private_addresses`` — with
DeerFlow's refusal strings (``bytedance/deer-flow:
backend/packages/harness/deerflow/community/url_safety.py``), since models were prompted with them.

Every hop of a redirect is checked again (``activities/web/fetch.py``). A host is resolved here and then again by
the HTTP client, so a name whose DNS answer changes in between (rebinding) is not caught: deployments that must
rule it out put the worker behind an egress proxy.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from urllib.parse import urlparse

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str], list[Address]]

_BLOCKED_HOSTNAMES = frozenset({"localhost", "metadata.google.internal"})


def resolve_host(hostname: str) -> list[Address]:
    try:
        infos = socket.getaddrinfo(hostname, None)
    except (socket.gaierror, UnicodeError):
        return []
    found: list[Address] = []
    for info in infos:
        try:
            found.append(ipaddress.ip_address(info[4][0]))
        except ValueError:
            continue
    return found


def is_blocked(address: Address) -> bool:
    return (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_reserved
        or address.is_multicast
        or address.is_unspecified
    )


def url_refusal(
    url: str, *, allow_private_addresses: bool = False, action: str = "fetch", resolver: Resolver = resolve_host
) -> str | None:
    """``"Error: ..."`` when ``url`` must not be fetched, ``None`` when it may."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        return "Error: Only http:// and https:// URLs are supported"
    if allow_private_addresses:
        return None
    hostname = parsed.hostname
    if not hostname:
        return "Error: URL host could not be parsed"
    host = hostname.strip().rstrip(".").lower()
    if host in _BLOCKED_HOSTNAMES:
        return f"Error: Refusing to {action} a private or loopback address"
    try:
        candidates: list[Address] = [ipaddress.ip_address(host)]
    except ValueError:
        candidates = resolver(hostname)
        if not candidates:
            return "Error: URL host could not be resolved"
    if any(is_blocked(address) for address in candidates):
        return f"Error: Refusing to {action} a private, loopback, or metadata address"
    return None
