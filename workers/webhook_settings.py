"""``webhooks:`` in ``hartflow.yaml``: a run's default webhook, the signing secret, the networks a webhook may
reach besides public addresses, and how long a delivery keeps trying (README, Webhooks)."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator

from activities.webhook_urls import Network, WebhookUrlError, parse_networks, split_url


class WebhookSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    default_url: str | None = Field(None, description="the webhook of runs that name none (API, CLI)")
    secret: str | None = Field(
        None,
        description="the HMAC-SHA256 key deliveries are signed with; '$NAME' reads the worker's environment "
        "variable NAME (unset: deliveries go unsigned)",
    )
    allow_networks: list[str] = Field(
        default_factory=list,
        description="networks a webhook may reach although they are private, loopback or link-local "
        "(CIDR: '10.0.0.0/8', '127.0.0.1/32')",
    )
    deadline_seconds: float = Field(3600, gt=0, le=7 * 24 * 3600, description="how long a delivery keeps retrying")

    @field_validator("default_url")
    @classmethod
    def _url_shape(cls, url: str | None) -> str | None:
        if url is not None:
            try:
                split_url(url)
            except WebhookUrlError as exc:
                raise ValueError(str(exc)) from None
        return url

    @field_validator("allow_networks")
    @classmethod
    def _networks(cls, entries: list[str]) -> list[str]:
        parse_networks(entries)
        return entries

    def networks(self) -> list[Network]:
        return parse_networks(self.allow_networks)

    def signing_secret(self, environ: Mapping[str, str]) -> str | None:
        """The secret as the worker uses it: ``$NAME`` from ``environ`` (a missing variable is an error)."""
        if self.secret is None or not self.secret.startswith("$"):
            return self.secret
        name = self.secret[1:]
        if name not in environ:
            raise ValueError(f"webhooks.secret names the environment variable {name}, which is not set")
        return environ[name]
