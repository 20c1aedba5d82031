"""Hand-computed retrieval cases (the issue's seed cases), trec_eval conventions, chunk runs, file reading."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ragmon.evaluation.errors import EvalInputError
from ragmon.evaluation.paragraphs import RetrievedChunk, evaluate_chunks, read_chunk_run
from ragmon.evaluation.retrieval import evaluate, evaluate_ranked, metric_names
from ragmon.evaluation.trec_files import read_qrels, read_run


def _ranked_run(docs: list[str]) -> dict[str, float]:
    # Strictly decreasing scores keep the listed order under trec_eval's sort.
    return {doc: float(len(docs) - i) for i, doc in enumerate(docs)}


def test_seed_precision_and_recall_at_5() -> None:
    qrels = {"q": {"a": 1, "c": 1, "e": 1, "z": 1}}  # 4 relevant in all
    report = evaluate(qrels, {"q": _ranked_run(["a", "b", "c", "d", "e", "f"])}, (5,))
    assert report.per_query["q"]["P@5"] == pytest.approx(0.6)  # 3 relevant of the top 5
    assert report.per_query["q"]["R@5"] == pytest.approx(0.75)  # 3 of the 4
    assert report.per_query["q"]["F1@5"] == pytest.approx(2 * 0.6 * 0.75 / 1.35)
    assert report.per_query["q"]["hit@5"] == 1.0


def test_seed_mrr_for_first_hits_at_ranks_1_4_2() -> None:
    qrels = {"1": {"a": 1}, "2": {"d": 1}, "3": {"b": 1}}
    run = {q: _ranked_run(["a", "b", "c", "d"]) for q in qrels}
    report = evaluate(qrels, run)
    assert [report.per_query[q]["MRR"] for q in ("1", "2", "3")] == [1.0, 0.25, 0.5]
    assert report.mean["MRR"] == pytest.approx(0.583, abs=5e-4)
    assert report.mean["MRR"] == pytest.approx(7 / 12)


def test_seed_ndcg_for_grades_3_2_0_1() -> None:
    # Linear gain, log2(rank + 1) discount, ideal from all judged relevant documents (here the same three):
    # DCG = 3 + 2/log2(3) + 0 + 1/log2(5) = 4.6925; ideal = 3 + 2/log2(3) + 1/log2(4) = 4.7619; ratio 0.9854.
    qrels = {"q": {"a": 3, "b": 2, "c": 0, "d": 1}}
    report = evaluate(qrels, {"q": _ranked_run(["a", "b", "c", "d"])}, (4, 10))
    dcg = 3 + 2 / math.log2(3) + 1 / math.log2(5)
    ideal = 3 + 2 / math.log2(3) + 1 / math.log2(4)
    assert report.per_query["q"]["nDCG@4"] == pytest.approx(dcg / ideal, abs=1e-12)
    assert round(report.per_query["q"]["nDCG@4"], 3) == 0.985
    assert report.per_query["q"]["nDCG@10"] == report.per_query["q"]["nDCG@4"]  # the same at any K ≥ 4


def test_ndcg_ideal_counts_relevant_documents_never_retrieved() -> None:
    qrels = {"q": {"a": 1, "b": 1}}
    report = evaluate(qrels, {"q": {"a": 2.0}}, (5,))
    assert report.per_query["q"]["nDCG@5"] == pytest.approx(1 / (1 + 1 / math.log2(3)))


def test_ties_break_by_docid_descending_in_byte_order() -> None:
    assert evaluate({"q": {"a": 1}}, {"q": {"a": 1.0, "b": 1.0}}).per_query["q"]["MRR"] == 0.5
    assert evaluate({"q": {"b": 1}}, {"q": {"a": 1.0, "b": 1.0}}).per_query["q"]["MRR"] == 1.0
    # "9" > "10" as strings, so "9" ranks first: document ids are not compared as numbers.
    assert evaluate({"q": {"10": 1}}, {"q": {"9": 1.0, "10": 1.0}}).per_query["q"]["MRR"] == 0.5


def test_query_selection_matches_trec_eval() -> None:
    qrels = {"judged": {"a": 1}, "not_run": {"a": 1}, "no_relevant": {"a": 0}, "empty_judgements": {}}
    run = {"judged": {"a": 1.0}, "unjudged": {"a": 1.0}, "no_relevant": {"a": 1.0}, "empty_judgements": {"a": 1.0}}
    run["empty_ranking"] = {}
    qrels["empty_ranking"] = {"a": 2}
    report = evaluate(qrels, run)
    assert list(report.per_query) == ["empty_ranking", "judged", "no_relevant"]
    assert report.per_query["no_relevant"] == dict.fromkeys(metric_names((5, 10)), 0.0)
    assert all(value == 0.0 for value in report.per_query["empty_ranking"].values())
    assert report.unjudged_queries == ("empty_judgements", "unjudged")
    assert report.unretrieved_queries == ("not_run",)
    assert report.mean["MRR"] == pytest.approx(1 / 3)


def test_negative_grades_are_non_relevant_and_gain_nothing() -> None:
    report = evaluate({"q": {"a": -1, "b": 2}}, {"q": {"a": 2.0, "b": 1.0}}, (5,))
    assert report.per_query["q"]["MRR"] == 0.5
    assert report.per_query["q"]["nDCG@5"] == pytest.approx(1 / math.log2(3))


def test_relevance_level_moves_the_threshold_but_not_ndcg_gains() -> None:
    qrels, run = {"q": {"a": 1, "b": 2}}, {"q": {"a": 2.0, "b": 1.0}}
    report = evaluate(qrels, run, (5,), relevance_level=2)
    assert report.per_query["q"]["MRR"] == 0.5
    assert report.per_query["q"]["R@5"] == 1.0
    assert report.per_query["q"]["nDCG@5"] == pytest.approx((1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3)))
    with pytest.raises(EvalInputError):
        evaluate(qrels, run, relevance_level=0)


def test_no_overlap_gives_nan_means_and_bad_cutoffs_are_rejected() -> None:
    report = evaluate({"q": {"a": 1}}, {"other": {"a": 1.0}})
    assert report.num_queries == 0 and math.isnan(report.mean["MRR"])
    with pytest.raises(EvalInputError):
        evaluate({"q": {"a": 1}}, {"q": {"a": 1.0}}, (0, 5))


def test_ranked_lists_keep_their_order_and_count_duplicates_once() -> None:
    qrels = {"q": {"a": 1, "b": 1}}
    report = evaluate_ranked(qrels, {"q": ["x", "a", "a", "a", "b"]}, (5,))
    assert report.per_query["q"]["MRR"] == 0.5
    assert report.per_query["q"]["P@5"] == pytest.approx(2 / 5)  # the two copies of "a" are filler
    assert report.per_query["q"]["R@5"] == 1.0


# -- chunk runs judged at paragraph level -------------------------------------------------------------------------


PARAGRAPH_QRELS = {"q": {"doc#p1": 3, "doc#p2": 1, "doc#p3": 2}}


def test_fragments_of_one_paragraph_count_once() -> None:
    # p1 split into three chunks: a naive chunk-level judgement would see three relevant results.
    run = {"q": [RetrievedChunk(f"c{i}", ("doc#p1",)) for i in range(3)]}
    report = evaluate_chunks(PARAGRAPH_QRELS, run, (3,))
    q = report.per_query["q"]
    assert q["P@3"] == pytest.approx(1 / 3)
    assert q["R@3"] == pytest.approx(1 / 3)
    assert q["nDCG@3"] == pytest.approx(3 / (3 + 2 / math.log2(3) + 1 / 2))
    assert q["nDCG@3"] <= 1.0


def test_a_chunk_covering_several_paragraphs_counts_them_for_recall_and_its_best_for_ndcg() -> None:
    run = {"q": [RetrievedChunk("c1", ("doc#p1", "doc#p2")), RetrievedChunk("c2", ("doc#p2", "doc#p3"))]}
    q = evaluate_chunks(PARAGRAPH_QRELS, run, (1, 2)).per_query["q"]
    assert q["R@1"] == pytest.approx(2 / 3)  # p1 and p2 reached at chunk rank 1
    assert q["R@2"] == 1.0
    assert q["P@2"] == 1.0  # c2 newly covers p3
    ideal = 3 + 2 / math.log2(3)
    assert q["nDCG@2"] == pytest.approx((3 + 2 / math.log2(3)) / ideal)  # c1 earns 3 (its best), c2 earns 2


def test_chunk_run_equals_document_run_when_chunks_are_whole_paragraphs() -> None:
    qrels = {"q": {"a": 3, "b": 0, "c": 1, "d": 2}}
    order = ["b", "a", "x", "d", "c"]
    as_docs = evaluate(qrels, {"q": _ranked_run(order)}, (1, 3, 5)).per_query["q"]
    as_chunks = evaluate_chunks(qrels, {"q": [RetrievedChunk(d, (d,)) for d in order]}, (1, 3, 5)).per_query["q"]
    assert as_chunks == pytest.approx(as_docs)


def test_nDCG_never_exceeds_one_for_random_chunkings() -> None:
    import random

    rng = random.Random(7)
    paragraphs = [f"p{i}" for i in range(12)]
    qrels = {"q": {p: rng.choice((0, 1, 2, 3)) for p in paragraphs}}
    for _ in range(200):
        chunks = [RetrievedChunk(str(i), tuple(rng.sample(paragraphs, rng.randint(1, 3)))) for i in range(8)]
        q = evaluate_chunks(qrels, {"q": chunks}, (1, 3, 5, 8)).per_query["q"]
        assert all(q[f"nDCG@{k}"] <= 1.0 + 1e-12 and q[f"R@{k}"] <= 1.0 for k in (1, 3, 5, 8))


def test_chunk_run_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text('{"query_id": "q", "chunks": [{"chunk_id": "c1", "paragraphs": ["doc#p1", "doc#p2"]}]}\n\n')
    assert read_chunk_run(path) == {"q": [RetrievedChunk("c1", ("doc#p1", "doc#p2"))]}
    path.write_text('{"query_id": "q", "chunks": [{"chunk_id": "c1"}]}\n')
    with pytest.raises(EvalInputError, match=":1:"):
        read_chunk_run(path)


# -- files -----------------------------------------------------------------------------------------------------------


def test_headed_tsv_and_trec_forms(tmp_path: Path) -> None:
    (tmp_path / "q.tsv").write_text("query-id\tcorpus-id\tcode\tgain\n1\t7\t2\t3\n1\t8\t-1\t0\n")
    (tmp_path / "beir.tsv").write_text("query-id\tcorpus-id\tscore\n1\t7\t3\n")
    (tmp_path / "r.tsv").write_text("query-id\tcorpus-id\trank\n1\t8\t1\n1\t7\t2\n")
    (tmp_path / "r.trec").write_text("1 Q0 8 1 0.5 tag\n1 Q0 7 2 0.9 tag\n")
    assert read_qrels(tmp_path / "q.tsv") == {"1": {"7": 3, "8": 0}}
    assert read_qrels(tmp_path / "beir.tsv") == {"1": {"7": 3}}
    assert read_run(tmp_path / "r.tsv") == {"1": {"8": -1.0, "7": -2.0}}  # -rank keeps the listed order
    # The rank column is ignored: 7 scores higher, so it ranks first whatever the file says.
    assert evaluate({"1": {"7": 1}}, read_run(tmp_path / "r.trec")).per_query["1"]["MRR"] == 1.0


@pytest.mark.parametrize(
    ("text", "reader", "message"),
    [
        ("1 0 a 1\n1 0 a 2\n", read_qrels, "duplicate"),
        ("1 0 a x\n", read_qrels, "not an integer"),
        ("1 0 a\n", read_qrels, "expected 4 fields"),
        ("1 Q0 a 1 0.5 t\n1 Q0 a 2 0.4 t\n", read_run, "duplicate"),
        ("1 Q0 a 1 nan t\n", read_run, "NaN"),
        ("1 Q0 a 1 high t\n", read_run, "not a number"),
        ("query-id\tcorpus-id\n1\t2\n", read_run, "neither a score nor a rank"),
    ],
)
def test_malformed_files_name_the_line(tmp_path: Path, text: str, reader: object, message: str) -> None:
    path = tmp_path / "input"
    path.write_text(text)
    with pytest.raises(EvalInputError, match=message):
        reader(path)  # type: ignore[operator]


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(EvalInputError, match="cannot read"):
        read_run(tmp_path / "absent")
