"""The judge worker inside `ragmon serve` (on by default; `ragmon judge` runs the same worker on its own).

Kept traces whose payload was copied are enqueued for the configured judge's version in the durable queue under
the data directory; a background event loop judges them within the judge's rate limit and budget and writes
scores to the store. Stopping lets in-flight traces finish within a deadline; the rest stay queued.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from judges.queue import JudgeQueue, Kept
from judges.registry import make_judge
from judges.store_adapter import StorePayloadSource, StoreScoreSink
from judges.worker import JudgeWorker
from ragmon.settings import JudgeSettings

log = logging.getLogger("ragmon.agent")


class JudgeService:
    def __init__(self, settings: JudgeSettings, store: Any, data_dir: Path) -> None:
        self.queue = JudgeQueue.in_data_dir(data_dir)
        self.judge = make_judge(settings.backend, settings)
        lock = threading.Lock()  # the worker's store calls, one at a time
        self.worker = JudgeWorker(
            self.queue, self.judge, StorePayloadSource(store, lock=lock), StoreScoreSink(store, lock=lock)
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name="ragmon-judge", daemon=True)

    def start(self) -> JudgeService:
        self._thread.start()
        return self

    def _run(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self.worker.run())
        except Exception:
            log.exception("the judge worker stopped on an error; kept traces stay queued")
        finally:
            loop.run_until_complete(self.judge.aclose())
            loop.close()

    def enqueue(self, kept: Sequence[dict[str, Any]]) -> int:
        items = [
            Kept(
                tenant=row["tenant"],
                trace_id=row["trace_id"],
                sampling_reason=(row.get("reasons") or [""])[0],
                inclusion_probability=row.get("probability"),
            )
            for row in kept
        ]
        return self.queue.enqueue(items, self.judge.version)

    def stop(self, timeout_s: float = 10.0) -> None:
        loop = self._loop
        if loop is not None and self._thread.is_alive():
            future = asyncio.run_coroutine_threadsafe(self.worker.stop(timeout_s), loop)
            try:
                future.result(timeout_s + 5)
            except Exception as exc:
                log.warning("judge worker did not stop cleanly: %s", exc)
        self._thread.join(timeout_s + 5)
        self.queue.close()
