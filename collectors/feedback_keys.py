"""Write-only feedback keys (`agent.feedback_keys`, tenant -> keys): what a browser or mobile client of the app
holds to send its users' feedback (`POST /v1/feedback`) for one tenant, and nothing else.

They are kept apart from every other key on purpose: the receivers' `ApiKeyAuth` (spans) and the API's `ReadKeys`
(reads) never see them, so a feedback key found in a page's source can write feedback for its tenant — rate-limited
and size-limited — and cannot send a span or read a row. The settings refuse a feedback key that is also another
key. Keys are compared in constant time, all of them each time (as `ApiKeyAuth` does).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import SecretStr

__all__ = ["FeedbackKey", "FeedbackKeys"]


@dataclass(frozen=True, slots=True)
class FeedbackKey:
    tenant: str
    name: str  # "<tenant>#<n>": which of the tenant's keys (its rate-limit bucket), never the key itself


class FeedbackKeys:
    def __init__(self, keys: Mapping[str, Sequence[str | SecretStr]] | None = None) -> None:
        self._keys: list[tuple[bytes, FeedbackKey]] = []
        for tenant, secrets in (keys or {}).items():
            for n, key in enumerate(secrets):
                secret = key.get_secret_value() if isinstance(key, SecretStr) else key
                if not secret:
                    raise ValueError(f"empty feedback key for tenant {tenant!r}")
                self._keys.append((secret.encode("utf-8"), FeedbackKey(tenant, f"{tenant}#{n}")))

    @property
    def configured(self) -> bool:
        return bool(self._keys)

    def key_for(self, presented: str | None) -> FeedbackKey | None:
        """The feedback key presented, or None (no key, another kind of key, a wrong key)."""
        if not presented:
            return None
        candidate = presented.strip().encode("utf-8", "surrogateescape")
        found: FeedbackKey | None = None
        for key, owner in self._keys:
            if hmac.compare_digest(candidate, key) and found is None:
                found = owner
        return found
