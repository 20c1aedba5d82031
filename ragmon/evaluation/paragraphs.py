"""Paragraph-level judgements for chunk runs, so labels survive re-chunking.

Qrels are written once per *paragraph* (``{qid: {paragraph_id: grade}}``, ids such as ``"handbook.md#p12"``). A
retriever returns *chunks*; each chunk records which paragraphs it covers, in rank order::

    {qid: [RetrievedChunk("c7", ("handbook.md#p12", "handbook.md#p13")), RetrievedChunk("c8", ("handbook.md#p12",))]}

Change the chunker and the labels still hold. The rules that keep the figures honest:

- Ranks are chunk ranks: K counts chunks, which is what reaches the prompt.
- A paragraph counts at its **first** covering chunk only. A later fragment of it earns nothing, so splitting a
  paragraph into three chunks cannot triple its recall or push nDCG above 1.
- A chunk is a hit (P@K, hit@K, MRR) when it newly covers at least one relevant paragraph (grade ≥ the level).
- R@K = distinct relevant paragraphs covered by the top K chunks / relevant paragraphs of the query.
- A chunk's nDCG gain is the *largest* grade among the paragraphs it newly covers. The ideal ranking puts one
  paragraph per rank, so each rank's gain is a distinct paragraph's grade and nDCG ≤ 1 always holds; the price is
  that a chunk packing two relevant paragraphs is credited for the better one only.
- Everything else (query selection, ideal DCG over all judged paragraphs, thresholds) is as in
  `ragmon.evaluation.retrieval`.

On disk a chunk run is JSONL, one query a line, chunks in rank order::

    {"query_id": "q1", "chunks": [{"chunk_id": "c7", "paragraphs": ["handbook.md#p12", "handbook.md#p13"]}]}
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ragmon.evaluation.errors import EvalInputError, read_input_text
from ragmon.evaluation.retrieval import (
    DEFAULT_KS,
    Qrels,
    RankedJudgements,
    RetrievalReport,
    build_report,
    judge_ideal,
    normalise_ks,
    select_queries,
)


@dataclass(frozen=True)
class RetrievedChunk:
    """One retrieved chunk and the paragraphs (or fragments of paragraphs) it covers."""

    chunk_id: str
    paragraph_ids: tuple[str, ...]


ChunkRun = Mapping[str, Sequence[RetrievedChunk]]


def evaluate_chunks(
    qrels: Qrels,
    run: ChunkRun,
    ks: Sequence[int] = DEFAULT_KS,
    *,
    relevance_level: int = 1,
    complete: bool = False,
) -> RetrievalReport:
    """P/R/F1/nDCG/hit@K and MRR of chunk rankings against paragraph-level qrels (rules in the module docstring)."""
    if relevance_level < 1:
        raise EvalInputError(f"relevance_level must be ≥ 1, got {relevance_level}")
    ks = normalise_ks(ks)
    chosen, unjudged, unretrieved = select_queries(qrels, run, complete=complete)
    lengths: list[int] = []
    gains: list[int] = []
    new_relevant: list[int] = []
    ideal: list[int] = []
    ideal_lengths: list[int] = []
    num_relevant: list[int] = []
    for qid in chosen:
        judgements = qrels[qid]
        seen: set[str] = set()
        chunks = run.get(qid, ())
        for chunk in chunks:
            grades = [judgements.get(p, 0) for p in dict.fromkeys(chunk.paragraph_ids) if p not in seen]
            seen.update(chunk.paragraph_ids)
            gains.append(max((g for g in grades if g > 0), default=0))
            new_relevant.append(sum(1 for g in grades if g >= relevance_level))
        lengths.append(len(chunks))
        num_relevant.append(judge_ideal(judgements, relevance_level, ks[-1], ideal, ideal_lengths))
    new_array = np.asarray(new_relevant, dtype=np.int64)
    judged = RankedJudgements(
        qids=chosen,
        lengths=np.asarray(lengths, dtype=np.int64),
        gains=np.asarray(gains, dtype=np.float64),
        hits=new_array > 0,
        new_relevant=new_array,
        num_relevant=np.asarray(num_relevant, dtype=np.int64),
        ideal=np.asarray(ideal, dtype=np.float64),
        ideal_lengths=np.asarray(ideal_lengths, dtype=np.int64),
    )
    return build_report(judged, ks, unjudged=unjudged, unretrieved=unretrieved, relevance_level=relevance_level)


def read_chunk_run(path: str | Path) -> dict[str, list[RetrievedChunk]]:
    """Read the JSONL chunk-run form shown in the module docstring."""
    path = Path(path)
    run: dict[str, list[RetrievedChunk]] = {}
    lines = read_input_text(path).splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            qid = record["query_id"]
            chunks = [
                RetrievedChunk(str(chunk["chunk_id"]), tuple(str(p) for p in chunk["paragraphs"]))
                for chunk in record["chunks"]
            ]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise EvalInputError(f"{path}:{number}: not a chunk-run record ({exc!r})") from exc
        if not isinstance(qid, str) or qid in run:
            raise EvalInputError(f"{path}:{number}: query_id must be a string, once per file; got {qid!r}")
        run[qid] = chunks
    return run
