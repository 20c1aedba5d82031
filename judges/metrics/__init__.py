"""RAG metrics, one small class per module: typed input and output models, a versioned prompt with few-shot
examples, the LLM steps that extract structure, and a pure `_compute_score` testable without a model.

Definitions follow Ragas (faithfulness, answer relevancy, context precision and recall) and the TruLens RAG triad
(context relevance). Undefined is None with a status, never 0.

`REGISTRY` is the one list of metrics (each a `ragmon.judges.protocol.Metric`): the LLM judge scores a metric by
its `score`, the local judge by its `score_locally`, back-evaluation prices it by its `planned_calls`, the worker
judges online the ones a production payload can feed (`ONLINE_METRICS`), and the dashboard lists them and their
review labels from it (through /api/dashboard/meta). A new metric is a module here and one entry below.
"""

from __future__ import annotations

from collections.abc import Mapping

from ragmon.judges.metrics.answer_relevance import AnswerRelevance
from ragmon.judges.metrics.context_precision import ContextPrecision
from ragmon.judges.metrics.context_recall import ContextRecall
from ragmon.judges.metrics.context_relevance import ContextRelevance
from ragmon.judges.metrics.faithfulness import Faithfulness
from ragmon.judges.protocol import Metric
from ragmon.judges.types import SampleField

# In the order they are shown: faithfulness first, since it says whether the answer can be trusted (the dashboard's
# trace list gives it a column); the retrieval metrics, which explain why not, after.
REGISTRY: tuple[Metric, ...] = (
    Faithfulness(),
    AnswerRelevance(),
    ContextPrecision(),
    ContextRelevance(),
    ContextRecall(),
)

METRICS: Mapping[str, Metric] = {m.name: m for m in REGISTRY}

# What a kept trace's payload holds: production traffic has no reference answer (context recall would be skipped).
PAYLOAD_FIELDS = frozenset({SampleField.QUESTION, SampleField.ANSWER, SampleField.PASSAGES})
ONLINE_METRICS: tuple[str, ...] = tuple(m.name for m in REGISTRY if m.needs <= PAYLOAD_FIELDS)

__all__ = [
    "METRICS",
    "ONLINE_METRICS",
    "PAYLOAD_FIELDS",
    "REGISTRY",
    "AnswerRelevance",
    "ContextPrecision",
    "ContextRecall",
    "ContextRelevance",
    "Faithfulness",
]
