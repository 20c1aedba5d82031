"""Each retrieved document's paragraph or source reaches `spans.retrieved_sources`, parallel to `retrieved_ids`, from
every dialect that can name one — through the agent's own normalising SQL (`otlp_views.install`), on both backends:

- ragmon's SDK / OTel GenAI: `gen_ai.retrieval.documents` entries' `"source"` (the SDK writes it: tests/test_sdk.py);
- OpenInference (LangChain, LlamaIndex): `retrieval.documents.N.document.metadata` / a reranker's
  `reranker.output_documents.N.document.metadata`, JSON text, the first of `SOURCE_METADATA_KEYS` present;
- a source that names none gives '' per id (ragmon's listed ids), and a malformed one never shifts the others.
"""

from __future__ import annotations

import json
import time

from ragmon.sinks import Store, otlp_views
from ragmon.sinks.dialects.openinference import SOURCE_METADATA_KEYS
from ragmon.sinks.envelope import seal

from tests.sinks import otlp_fixture as fx

NOW_NS = (int(time.time()) // 60 * 60 - 600) * 10**9
TRACE = "ab" * 16


def _span(i: int, **attributes: object) -> dict:
    return {
        "trace_id": TRACE,
        "span_id": f"{i:016x}",
        "parent_span_id": "" if i == 1 else f"{1:016x}",
        "name": f"span {i}",
        "start_ns": NOW_NS + i * 1_000_000,
        "duration_ms": 10.0,
        "attributes": attributes,
    }


def _oi_documents(prefix: str, docs: list[tuple[str, float, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for n, (doc_id, score, metadata) in enumerate(docs):
        out[f"{prefix}.{n}.document.id"] = doc_id
        out[f"{prefix}.{n}.document.score"] = score
        out[f"{prefix}.{n}.document.content"] = f"text of {doc_id}"
        if metadata is not None:
            out[f"{prefix}.{n}.document.metadata"] = metadata if isinstance(metadata, str) else json.dumps(metadata)
    return out


SPANS = [
    _span(1, **{"ragmon.stage": "request", "ragmon.feature": "support"}),
    # ragmon's SDK: some documents name their paragraph, one does not
    _span(
        2,
        **{
            "gen_ai.operation.name": "retrieval",
            "gen_ai.retrieval.documents": json.dumps(
                [
                    {"id": "c1", "score": 0.9, "source": "refunds.md#p3"},
                    {"id": "c2", "score": 0.8},
                    {"id": "c3", "score": 0.7, "source": 42},
                ]
            ),
        },
    ),
    # OpenInference, LlamaIndex-like (file_name), LangChain-like (source), an explicit paragraph_id beating source,
    # a document without metadata, metadata that is not JSON, metadata naming nothing ragmon reads
    _span(
        3,
        **{
            "openinference.span.kind": "RETRIEVER",
            **_oi_documents(
                "retrieval.documents",
                [
                    ("n1", 0.9, {"file_name": "install.md", "file_path": "/docs/install.md"}),
                    ("n2", 0.8, {"source": "https://example.com/faq", "page": 2}),
                    ("n3", 0.7, {"source": "faq.md", "paragraph_id": "faq.md#p7"}),
                    ("n4", 0.6, None),
                    ("n5", 0.5, "not json {"),
                    ("n6", 0.4, {"author": "someone"}),
                    ("n7", 0.3, {"ref_doc_id": 17}),
                ],
            ),
        },
    ),
    # an OpenInference reranker: its output documents are the span's documents
    _span(
        4,
        **{
            "openinference.span.kind": "RERANKER",
            **_oi_documents("reranker.input_documents", [("n1", 0.1, {"source": "input-only"})]),
            **_oi_documents("reranker.output_documents", [("n3", 0.99, {"doc_id": "faq"}), ("n1", 0.5, {"url": "u"})]),
        },
    ),
    # ragmon's listed ids (older SDKs): no sources
    _span(
        5,
        **{
            "gen_ai.operation.name": "retrieval",
            "ragmon.retrieval.document_ids": ["d1", "d2"],
            "ragmon.retrieval.document_scores": [0.9, 0.8],
        },
    ),
]


def test_retrieved_sources_come_from_every_dialect_parallel_to_the_ids(store: Store) -> None:
    otlp_views.install(store)
    store.insert_otlp([seal(fx.encode_request(SPANS), "acme", 1)], dedup_token="sources")
    rows = store.query(
        f"SELECT span_id, retrieved_ids, retrieved_sources, length(retrieved_scores) AS scores "
        f"FROM {store.topology.database}.spans ORDER BY span_id"
    )
    got = {int(r["span_id"], 16): (list(r["retrieved_ids"]), list(r["retrieved_sources"])) for r in rows}
    assert got[1] == ([], [])
    assert got[2] == (["c1", "c2", "c3"], ["refunds.md#p3", "", "42"])
    assert got[3] == (
        ["n1", "n2", "n3", "n4", "n5", "n6", "n7"],
        ["/docs/install.md", "https://example.com/faq", "faq.md#p7", "", "", "", "17"],
    )
    assert got[4] == (["n3", "n1"], ["faq", "u"])
    assert got[5] == (["d1", "d2"], ["", ""])
    assert all(int(r["scores"]) == len(got[int(r["span_id"], 16)][0]) for r in rows)


def test_the_documented_metadata_keys_are_read_in_their_order(store: Store) -> None:
    # each key alone is read; with all of them present the first listed wins
    docs = [(f"k{n}", 0.5, {key: f"v-{key}"}) for n, key in enumerate(SOURCE_METADATA_KEYS)]
    docs.append(("all", 0.5, {key: f"v-{key}" for key in reversed(SOURCE_METADATA_KEYS)}))
    spans = [
        _span(1, **{"ragmon.stage": "request"}),
        _span(2, **{"openinference.span.kind": "RETRIEVER", **_oi_documents("retrieval.documents", docs)}),
    ]
    otlp_views.install(store)
    store.insert_otlp([seal(fx.encode_request(spans), "acme", 1)], dedup_token="keys")
    row = store.query(
        f"SELECT retrieved_sources FROM {store.topology.database}.spans WHERE span_id = '{2:016x}'"
    )[0]
    assert list(row["retrieved_sources"]) == [f"v-{key}" for key in SOURCE_METADATA_KEYS] + [
        f"v-{SOURCE_METADATA_KEYS[0]}"
    ]
