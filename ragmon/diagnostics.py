"""Rate-limited logging: a problem that repeats per span is logged once per interval with a count, never per item."""

from __future__ import annotations

import logging
import threading
import time

logger = logging.getLogger("ragmon")

_INTERVAL_S = 30.0
_lock = threading.Lock()
_last: dict[str, tuple[float, int]] = {}  # key -> (last logged at, suppressed since)


def warn_limited(key: str, message: str, *args: object, level: int = logging.WARNING) -> None:
    now = time.monotonic()
    with _lock:
        last_at, suppressed = _last.get(key, (-_INTERVAL_S, 0))
        if now - last_at < _INTERVAL_S:
            _last[key] = (last_at, suppressed + 1)
            return
        _last[key] = (now, 0)
    if suppressed:
        message += " (%d similar messages suppressed)"
        args = (*args, suppressed)
    logger.log(level, message, *args)
