"""The store as a `ragmon judge` worker sees it when a running agent owns the embedded store: the agent's judge
endpoints (`ragmon.agent.api`), with the two calls the store adapters make (`payloads_for_judging`,
`insert_scores`), so `StorePayloadSource` / `StoreScoreSink` wrap it as they wrap a store.

The agent's address (`agent.json`) and judge token (`judge-api.token`) are read from the data directory again
after a failure, so a restarted agent (a new token, perhaps a new port) is found without restarting the worker.
An agent that cannot be reached raises `SourceUnavailable`: the worker puts the item back without counting the
attempt, and a score delivery that fails is retried from the queue's outbox — an agent restart loses nothing.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ragmon.judges.worker import SourceUnavailable

from ragmon.data_dir import AGENT_FILE, JUDGE_TOKEN_FILE

_RETRYABLE_STATUSES = {429, 502, 503, 504}

log = logging.getLogger("ragmon.judges")


class AgentStoreClient:
    def __init__(self, data_dir: str | Path, *, timeout_s: float = 60.0) -> None:
        self.data_dir = Path(data_dir)
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._endpoint: tuple[str, str] | None = None  # (api url, token)
        self._unavailable = False  # said once per outage in the log, not once per item

    def payloads_for_judging(self, tenant: str, trace_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        body = {"tenant": tenant, "trace_ids": list(trace_ids)}
        found: dict[str, dict[str, Any]] = self._post("/api/judge/payloads", body)
        return found

    def insert_scores(self, rows: Iterable[Mapping[str, Any]], dedup_token: str | None = None) -> str:
        # No token of ours: the agent's store derives it from the rows, as it would for a direct insert.
        self._post("/api/judge/scores", {"rows": list(rows)})
        return ""

    def close(self) -> None:
        return None

    @property
    def api(self) -> str:
        return self._current()[0]

    def _current(self) -> tuple[str, str]:
        with self._lock:
            endpoint = self._endpoint
        if endpoint is None:  # read outside the lock: a failed read takes it to note the outage
            endpoint = self._read_endpoint()
            with self._lock:
                self._endpoint = endpoint
        return endpoint

    def _read_endpoint(self) -> tuple[str, str]:
        try:
            owner = json.loads((self.data_dir / AGENT_FILE).read_text())
            token = (self.data_dir / JUDGE_TOKEN_FILE).read_text().strip()
        except (OSError, ValueError) as exc:
            raise self._unreachable(f"no running agent found in {self.data_dir}: {exc}") from exc
        if not isinstance(owner, dict) or "api" not in owner:
            raise self._unreachable(f"the agent in {self.data_dir} published no API address")
        return str(owner["api"]), token

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        api, token = self._current()
        request = urllib.request.Request(
            f"{api}{path}",
            data=json.dumps(body, default=str).encode(),
            headers={"Content-Type": "application/json", "X-Ragmon-Judge-Token": token},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            if exc.code == 403 or exc.code in _RETRYABLE_STATUSES:
                # 403: the agent restarted with a new token; read it again next time
                raise self._unreachable(f"the agent at {api} answered {exc.code}: {detail}") from exc
            raise RuntimeError(f"the agent at {api} answered {exc.code}: {detail}") from exc
        except OSError as exc:  # refused, reset, timed out: the agent is down or restarting
            raise self._unreachable(f"cannot reach the agent at {api}: {exc}") from exc
        if self._unavailable:
            self._unavailable = False
            log.warning("the agent at %s answers again", api)
        return answer

    def _unreachable(self, why: str) -> SourceUnavailable:
        with self._lock:
            self._endpoint = None
            first = not self._unavailable
            self._unavailable = True
        if first:
            log.warning("%s; traces wait in the queue until it answers", why)
        return SourceUnavailable(why)
