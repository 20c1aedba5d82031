"""Who may write labels: reviewer keys (`agent.reviewer_keys`, tenant -> {reviewer name -> key}).

A reviewer key is a read key of its tenant that may also write labels; a read key (`agent.api_keys`) never may.
Keys are taken from the same headers as every other key (``Authorization: Bearer`` or ``x-api-key``), never from
a cookie: a page on another site cannot make a browser send a header, so it cannot label on a reviewer's behalf.
Every configured key is compared in constant time, all of them each time (as `ApiKeyAuth` does).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from pydantic import SecretStr

from ragmon.collectors.auth import ApiKeyAuth

__all__ = ["KeyAuth", "ReadKeys", "Reviewer", "ReviewerKeys"]


class KeyAuth(Protocol):
    """Which tenant a read request's key belongs to (`ApiKeyAuth`, `ReadKeys`)."""

    @property
    def required(self) -> bool: ...

    def tenant_for(self, authorization: str | None = None, api_key: str | None = None) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Reviewer:
    tenant: str
    name: str


def _presented(authorization: str | None, api_key: str | None) -> str | None:
    if authorization:
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return api_key.strip() if api_key and api_key.strip() else None


class ReviewerKeys:
    def __init__(self, keys: Mapping[str, Mapping[str, str | SecretStr]] | None = None) -> None:
        self._keys: list[tuple[bytes, Reviewer]] = []
        for tenant, reviewers in (keys or {}).items():
            for name, key in reviewers.items():
                secret = key.get_secret_value() if isinstance(key, SecretStr) else key
                if not secret:
                    raise ValueError(f"empty reviewer key for {name!r} of tenant {tenant!r}")
                self._keys.append((secret.encode("utf-8"), Reviewer(tenant, name)))

    @property
    def configured(self) -> bool:
        return bool(self._keys)

    def reviewer_for(self, authorization: str | None = None, api_key: str | None = None) -> Reviewer | None:
        """The reviewer whose key was presented, or None (no key, a read key, a wrong key)."""
        presented = _presented(authorization, api_key)
        if presented is None:
            return None
        candidate = presented.encode("utf-8", "surrogateescape")
        found: Reviewer | None = None
        for key, reviewer in self._keys:
            if hmac.compare_digest(candidate, key) and found is None:
                found = reviewer
        return found


class ReadKeys:
    """What the read API and the dashboard accept: the tenant's API keys and its reviewers' keys. With no API
    keys configured reads are open, as they always were (`required` False)."""

    def __init__(self, api_keys: ApiKeyAuth, reviewers: ReviewerKeys) -> None:
        self.api_keys = api_keys
        self.reviewers = reviewers

    @property
    def required(self) -> bool:
        return self.api_keys.required

    def tenant_for(self, authorization: str | None = None, api_key: str | None = None) -> str | None:
        tenant = self.api_keys.tenant_for(authorization, api_key)
        if tenant is not None:
            return tenant
        reviewer = self.reviewers.reviewer_for(authorization, api_key)
        return reviewer.tenant if reviewer is not None else None
