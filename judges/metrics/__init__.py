"""RAG metrics, one small class per module: typed input and output models, a versioned prompt with few-shot
examples, the LLM steps that extract structure, and a pure `_compute_score` testable without a model.

Definitions follow Ragas (faithfulness, answer relevancy, context precision and recall) and the TruLens RAG triad
(context relevance). Undefined is None with a status, never 0.
"""

from __future__ import annotations

from ragmon.judges.metrics.answer_relevance import AnswerRelevance
from ragmon.judges.metrics.context_precision import ContextPrecision
from ragmon.judges.metrics.context_recall import ContextRecall
from ragmon.judges.metrics.context_relevance import ContextRelevance
from ragmon.judges.metrics.faithfulness import Faithfulness

METRICS = {m.name: m for m in (Faithfulness, AnswerRelevance, ContextPrecision, ContextRelevance, ContextRecall)}

__all__ = ["METRICS", "AnswerRelevance", "ContextPrecision", "ContextRecall", "ContextRelevance", "Faithfulness"]
