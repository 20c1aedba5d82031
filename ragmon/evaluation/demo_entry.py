"""The demo RAG app as an evaluation entry point: ``ragmon eval run DATASET --app ragmon.evaluation.demo_entry:answer``.

One `ragmon.demo.RagApp` per process, without injected faults, built on first use. The demo's generator says
`ragmon.demo.generator.NO_ANSWER` when its passages do not answer the question; that is its refusal, reported as
``refused`` so the refusal metrics do not depend on wording rules.
"""

from __future__ import annotations

import threading
from typing import Any

from ragmon.demo import RagApp
from ragmon.demo.app import DEFAULT_FEATURE
from ragmon.demo.generator import NO_ANSWER
from ragmon.evaluation.dataset import DatasetRow

_lock = threading.Lock()
_app: Any = None


def _demo_app() -> Any:
    global _app
    with _lock:
        if _app is None:
            _app = RagApp()
        return _app


def answer(row: DatasetRow) -> dict[str, Any]:
    result = _demo_app().answer(row.question, feature=row.feature or DEFAULT_FEATURE)
    return {"answer": result.text, "refused": result.text.startswith(NO_ANSWER), "trace_id": result.trace_id}
