"""API-key authentication for the receivers: which tenant a request belongs to, or None to refuse it.

Keys come from `AgentSettings.api_keys` (tenant → key). A key is accepted from ``Authorization: Bearer <key>``
or ``x-api-key: <key>``. Every configured key is compared with `hmac.compare_digest`, always all of them, so the
time taken says nothing about which key (or how much of one) matched. With no keys configured every request
is accepted under `default_tenant`. The tenant is never read from span attributes.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from pydantic import SecretStr

__all__ = ["ApiKeyAuth"]


class ApiKeyAuth:
    def __init__(
        self, keys_by_tenant: Mapping[str, str | SecretStr] | None = None, default_tenant: str = "default"
    ) -> None:
        self.default_tenant = default_tenant
        self._keys: list[tuple[bytes, str]] = []
        for tenant, key in (keys_by_tenant or {}).items():
            secret = key.get_secret_value() if isinstance(key, SecretStr) else key
            if not secret:
                raise ValueError(f"empty API key for tenant {tenant!r}")
            self._keys.append((secret.encode("utf-8"), tenant))

    @property
    def required(self) -> bool:
        return bool(self._keys)

    def tenant_for(self, authorization: str | None = None, api_key: str | None = None) -> str | None:
        """The tenant of the presented key; `default_tenant` when no keys are configured; None to refuse."""
        if not self._keys:
            return self.default_tenant
        presented = _bearer(authorization) if authorization else None
        if presented is None:
            presented = api_key
        if not presented:
            return None
        candidate = presented.strip().encode("utf-8", "surrogateescape")
        found: str | None = None
        for key, tenant in self._keys:
            if hmac.compare_digest(candidate, key) and found is None:
                found = tenant
        return found


def _bearer(authorization: str) -> str | None:
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None
