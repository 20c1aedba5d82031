"""Read relevance judgements (qrels) and ranked runs from TREC files and from headed TSV files.

Accepted forms (whitespace-separated unless headed):

- qrels, TREC: ``qid iter docid rel`` — the iteration column is ignored, as trec_eval ignores it.
- qrels, headed TSV (BEIR, Cranfield): a header line ``query-id  corpus-id  …`` naming the columns; the grade
  comes from the ``gain`` column when there is one (Cranfield: gain = 5 - code, non-relevant → 0), else ``score``
  (BEIR), else ``rel``.
- run, TREC: ``qid Q0 docid rank score tag`` — ordering comes from the score alone (see `ragmon.evaluation.retrieval`);
  the rank column is ignored, exactly as trec_eval ignores it.
- run, headed TSV: ``query-id  corpus-id  rank  score``; without a ``score`` column the score is ``-rank`` so the
  given ranks are kept.

Grades are integers (trec_eval reads them with ``atol``); scores are finite floats. A (query, document) pair that
appears twice in one file is an error, as in trec_eval ("duplicate docs"): silently keeping one of the two would
make the figures depend on file order. Blank lines are skipped.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

from ragmon.evaluation.errors import EvalInputError

Qrels = dict[str, dict[str, int]]
Run = dict[str, dict[str, float]]

_HEADER_FIRST = frozenset({"query-id", "query_id", "qid", "query"})
_QUERY_COLUMNS = ("query-id", "query_id", "qid", "query")
_DOC_COLUMNS = ("corpus-id", "corpus_id", "doc-id", "doc_id", "docid", "docno")


def _lines(path: Path) -> Iterator[tuple[int, list[str]]]:
    try:
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                fields = line.split()
                if fields:
                    yield number, fields
    except OSError as exc:
        raise EvalInputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise EvalInputError(f"{path}: not UTF-8 text ({exc.reason})") from exc


def _column(header: list[str], names: tuple[str, ...]) -> int | None:
    lowered = [name.lower() for name in header]
    for name in names:
        if name in lowered:
            return lowered.index(name)
    return None


def _required(header: list[str], names: tuple[str, ...], path: Path, what: str) -> int:
    found = _column(header, names)
    if found is None:
        raise EvalInputError(f"{path}: header {header!r} has no {what} column (one of {', '.join(names)})")
    return found


def _int_grade(text: str, path: Path, number: int) -> int:
    try:
        return int(text)
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if value.is_integer():
            return int(value)
        raise EvalInputError(f"{path}:{number}: relevance grade {text!r} is not an integer") from None


def _score(text: str, path: Path, number: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise EvalInputError(f"{path}:{number}: score {text!r} is not a number") from None
    if math.isnan(value):
        # NaN compares false both ways, so a run containing one has no defined order.
        raise EvalInputError(f"{path}:{number}: score is NaN")
    return value


def read_qrels(path: str | Path) -> Qrels:
    """Read judgements as ``{qid: {docid: grade}}`` (the shape pytrec_eval takes)."""
    path = Path(path)
    qrels: Qrels = {}
    query_col, doc_col, grade_col, width = 0, 2, 3, 4
    first = True
    for number, fields in _lines(path):
        if first and fields[0].lower() in _HEADER_FIRST:
            query_col = _required(fields, _QUERY_COLUMNS, path, "query")
            doc_col = _required(fields, _DOC_COLUMNS, path, "document")
            grade_col = _required(fields, ("gain", "score", "rel", "relevance"), path, "grade")
            width = len(fields)
            first = False
            continue
        first = False
        if len(fields) != width:
            raise EvalInputError(f"{path}:{number}: expected {width} fields, found {len(fields)}")
        per_query = qrels.setdefault(fields[query_col], {})
        docid = fields[doc_col]
        if docid in per_query:
            raise EvalInputError(f"{path}:{number}: duplicate judgement for query {fields[query_col]!r}, {docid!r}")
        per_query[docid] = _int_grade(fields[grade_col], path, number)
    return qrels


def read_run(path: str | Path) -> Run:
    """Read a run as ``{qid: {docid: score}}``; order is recovered from the scores (trec_eval's rule)."""
    path = Path(path)
    run: Run = {}
    query_col, doc_col, score_col, rank_col, width = 0, 2, 4, 3, 6
    first = True
    for number, fields in _lines(path):
        if first and fields[0].lower() in _HEADER_FIRST:
            query_col = _required(fields, _QUERY_COLUMNS, path, "query")
            doc_col = _required(fields, _DOC_COLUMNS, path, "document")
            found_score = _column(fields, ("score", "sim"))
            found_rank = _column(fields, ("rank",))
            if found_score is None and found_rank is None:
                raise EvalInputError(f"{path}:{number}: header {fields!r} has neither a score nor a rank column")
            score_col = found_score if found_score is not None else -1
            rank_col = found_rank if found_rank is not None else -1
            width = len(fields)
            first = False
            continue
        first = False
        if len(fields) != width:
            raise EvalInputError(f"{path}:{number}: expected {width} fields, found {len(fields)}")
        # Without scores, -rank keeps the given order under trec_eval's "highest score first" rule.
        score = _score(fields[score_col], path, number) if score_col >= 0 else -_score(fields[rank_col], path, number)
        per_query = run.setdefault(fields[query_col], {})
        docid = fields[doc_col]
        if docid in per_query:
            raise EvalInputError(f"{path}:{number}: duplicate document {docid!r} for query {fields[query_col]!r}")
        per_query[docid] = score
    return run
