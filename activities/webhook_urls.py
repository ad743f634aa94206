"""Which webhook URLs a run may report to: the guard against server-side request forgery that the Agent Server
applies when a run is asked for (``workers/api/webhooks.py``) and the worker again before every delivery
attempt (``activities/webhooks.py``), on every address the host resolves to at that moment.

An address is refused when it is not globally routable (loopback, private, link-local with the cloud metadata
address, carrier-grade NAT, multicast, reserved, unspecified, ...) unless a network of ``webhooks.allow_networks``
holds it; a name is checked by what it resolves to, every address of it, so a name that points one of its
addresses inward is refused whole.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_URL_CHARS = 2048


class WebhookUrlError(ValueError):
    """The URL is not one a run may report to; the message says why (a client's 422, a delivery's final error)."""


def parse_networks(entries: Iterable[str]) -> list[Network]:
    """``webhooks.allow_networks`` as networks (``127.0.0.1/32``, ``10.0.0.0/8``, ``::1/128``); a bad entry raises
    ``ValueError`` naming it."""
    return [ipaddress.ip_network(entry, strict=False) for entry in entries]


def split_url(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of an ``http``/``https`` URL without credentials; else :class:`WebhookUrlError`."""
    if len(url) > MAX_URL_CHARS:
        raise WebhookUrlError(f"webhook: the URL is longer than {MAX_URL_CHARS} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise WebhookUrlError(f"webhook: not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebhookUrlError("webhook: an http or https URL with a host is needed")
    if parts.username is not None or parts.password is not None:
        raise WebhookUrlError("webhook: credentials in the URL are not taken (they would be stored with the run)")
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80)


def refused_address(addresses: Iterable[str], allowed: Iterable[Network]) -> str | None:
    """The first of ``addresses`` a webhook may not reach (``None``: all may); an empty list is refused too."""
    networks = list(allowed)
    seen = False
    for text in addresses:
        seen = True
        address: Address = ipaddress.ip_address(text.split("%", 1)[0])  # an IPv6 scope id is no part of it
        mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
        checked = mapped or address
        if any(checked in network for network in networks):
            continue
        if not checked.is_global or checked.is_multicast:
            return text
    return None if seen else "(no address)"
