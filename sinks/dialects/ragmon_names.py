"""The ragmon SDK's own names (`ragmon.*`, declared in `ragmon.attributes`): the dialect of highest precedence.

Fields: stage, feature, user, session, cost, search units, the scores the SDK computed at retrieval, time to first
token; documents: the retriever's ids and scores, or a reranker's output. Captured text: the question and answer
the app gave and the passages' texts. (The payload copy also reads `ragmon.question` and `ragmon.answer` by name,
as the trace's own question and answer before any role: `ragmon.sinks.sampler_sql`.)
"""

from __future__ import annotations

from typing import Final

from ragmon.sinks.dialects.common import DialectSql, Documents, get, stage_lookup
from ragmon.sinks.sql_values import number, raw, text

from ragmon import attributes as A

QUESTION: Final = A.RAGMON_QUESTION
ANSWER: Final = A.RAGMON_ANSWER
DOCUMENT_TEXTS: Final = A.RAGMON_DOCUMENT_TEXTS  # JSON list, in rank order
CONTENT_KEYS: Final = frozenset({QUESTION, ANSWER, DOCUMENT_TEXTS})


def _listed_documents(ids_key: str, scores_key: str) -> Documents:
    """ids and scores from two list attributes (arrays, or JSON text of arrays: some SDKs flatten lists)."""
    ids_text = f"ifNull({raw(ids_key)}, '')"
    return Documents(
        present=f"JSONType({ids_text}) = 'Array'",
        # string elements unquoted, others (numbers) as their JSON text, null as 'null': one parse of the list
        # (reading each raw element again for its type and its string cost several times as much per document)
        ids=f"arrayMap(x -> ifNull(x, 'null'), JSONExtract({ids_text}, 'Array(Nullable(String))'))",
        scores=f"JSONExtract(ifNull({raw(scores_key)}, ''), 'Array(Nullable(Float64))')",
    )


def span_fields() -> DialectSql:
    """The span's fields in ragmon's names; the retriever's documents, else a reranker's output."""
    return DialectSql(
        keys=frozenset(
            {
                A.RAGMON_STAGE,
                A.RAGMON_FEATURE,
                A.RAGMON_USER,
                A.RAGMON_SESSION,
                A.RAGMON_COST_USD,
                A.RAGMON_SEARCH_UNITS,
                A.RAGMON_TOP1_SCORE,
                A.RAGMON_SIMILARITY_GAP,
                A.RAGMON_DOCUMENT_IDS,
                A.RAGMON_DOCUMENT_SCORES,
                A.RAGMON_QUERY_NORM_DEVIATION,
                A.RAGMON_RERANK_OUTPUT_IDS,
                A.RAGMON_RERANK_OUTPUT_SCORES,
                A.RAGMON_TTFT_MS,
            }
        ),
        fields={
            "stage": stage_lookup(raw(A.RAGMON_STAGE), {s: s for s in A.STAGES}),
            "feature": text(A.RAGMON_FEATURE),
            "user": text(A.RAGMON_USER),
            "session": text(A.RAGMON_SESSION),
            "cost_usd": number(A.RAGMON_COST_USD),
            "search_units": number(A.RAGMON_SEARCH_UNITS),
            "top1_score": number(A.RAGMON_TOP1_SCORE),
            "similarity_gap": number(A.RAGMON_SIMILARITY_GAP),
            "norm_deviation": number(A.RAGMON_QUERY_NORM_DEVIATION),
            "ttft_ms": number(A.RAGMON_TTFT_MS),
        },
        documents=(
            _listed_documents(A.RAGMON_DOCUMENT_IDS, A.RAGMON_DOCUMENT_SCORES),
            _listed_documents(A.RAGMON_RERANK_OUTPUT_IDS, A.RAGMON_RERANK_OUTPUT_SCORES),
        ),
    )


# --- content roles, over `c` (a span's captured text) -----------------------------------------------------
DOCUMENT_KEYS: Final = (DOCUMENT_TEXTS,)  # a span that carries documents' texts


def document_texts(c: str) -> tuple[str, ...]:
    """Array(String): the passages' texts, a JSON list in rank order."""
    texts = get(c, DOCUMENT_TEXTS)
    return (f"if(isValidJSON({texts}), JSONExtract({texts}, 'Array(String)'), [])",)
