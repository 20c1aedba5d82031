"""v4 of the local judge's faithfulness: a graded answer probability from a soft minimum of claim logits, the
fitting script's gradient for it, and `ragmon calibrate` naming the kinds the judge was not fitted on; v6's
paraphrases and wrong numbers."""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import ragmon.judges.local_judge
from ragmon.judges import text
from ragmon.judges.alignment import SentenceIndex, negated_copy
from ragmon.judges.calibration import LabelledRow, is_heldout, kinds_not_fitted_on, load_rows
from ragmon.judges.local_judge import LocalJudge
from ragmon.judges.local_model import (
    FITTED_TASKS,
    MODELS,
    NEGATED_COPY_SUPPORT,
    answer_probability,
    claim_support,
    sigmoid,
    soft_min,
)
from ragmon.judges.types import RagSample, Verdict

from ragmon.commands.judge import add_calibrate_arguments, calibrate
from tests.judges.conftest import DEV_DATA

PASSAGES = [
    "The Eiffel Tower was completed in 1889. It is 330 metres tall and stands in Paris.",
    "Gustave Eiffel's company designed and built the tower.",
]


async def _probability(judge: LocalJudge, answer: str, *, question: str, passages: Sequence[str] = PASSAGES) -> float:
    """The judge's faithfulness probability for one answer, which it must score."""
    result = await judge.score("faithfulness", RagSample(question=question, answer=answer, passages=list(passages)))
    assert result.value is not None
    return result.value


def _fit_script() -> ModuleType:
    # benchmarks/ is a directory of scripts, not a package: load the file itself.
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "fit_local_judge.py"
    spec = importlib.util.spec_from_file_location("fit_local_judge", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fit_local_judge", module)
    spec.loader.exec_module(module)
    return module


def test_soft_min_runs_from_the_minimum_to_the_mean() -> None:
    logits = [3.0, 2.0, -1.0]
    assert soft_min(logits, 0.0) == -1.0
    assert soft_min(logits, 1e6) == pytest.approx(sum(logits) / 3, abs=1e-4)
    values = [soft_min(logits, t) for t in (0.1, 0.5, 1.0, 3.0, 10.0)]
    assert values == sorted(values) and min(logits) < values[0] and values[-1] < sum(logits) / 3
    assert soft_min([2.0], 3.0) == pytest.approx(2.0)  # one claim: its own logit, whatever τ
    assert soft_min([2.0, 2.0, 2.0], 3.0) == pytest.approx(2.0)  # repeating a claim neither helps nor hurts


def test_the_fitting_gradient_is_the_derivative_of_the_answer_loss() -> None:
    """The soft-min rule's hand-written gradient against finite differences of the answer-level log loss."""
    fit = _fit_script()
    rng = np.random.default_rng(7)
    counts = np.array([1, 3, 2])
    owner = np.repeat(np.arange(3), counts)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    z = rng.normal(size=counts.sum())
    y = np.array([1.0, 0.0, 1.0])
    temperature = 1.5

    def loss(logits: np.ndarray) -> float:
        total = 0.0
        for answer in range(3):
            s = soft_min(list(logits[owner == answer]), temperature)
            p = 1 / (1 + math.exp(-s))
            total -= y[answer] * math.log(p) + (1 - y[answer]) * math.log(1 - p)
        return total

    analytic = fit._answer_gradient(z, owner, starts, y, temperature)
    for k in range(len(z)):
        step = np.zeros_like(z)
        step[k] = 1e-6
        numeric = (loss(z + step) - loss(z - step)) / 2e-6
        assert analytic[k] == pytest.approx(numeric, abs=1e-5), k


async def test_one_weak_clause_lowers_the_score_without_zeroing_it() -> None:
    judge = LocalJudge(use_minilm=False)
    copied = RagSample(answer="The Eiffel Tower was completed in 1889. It is 330 metres tall.", passages=PASSAGES)
    invented = RagSample(
        answer="The Eiffel Tower was completed in 1889. It was designed by Frank Lloyd Wright.", passages=PASSAGES
    )
    good = await judge.score("faithfulness", copied)
    bad = await judge.score("faithfulness", invented)
    assert good.value is not None and bad.value is not None
    assert [c.verdict for c in good.claims] == [Verdict.SUPPORTED, Verdict.SUPPORTED]
    assert good.value >= judge.faithfulness_threshold > bad.value
    # graded: the answer with one invented clause sits between its claims' supports, not at 0 or at the share 1/2
    supports = [c.support for c in bad.claims]
    assert min(supports) < bad.value < max(supports)
    assert "P(faithful)" in bad.explanation


async def test_a_long_copied_answer_is_not_failed_for_its_length() -> None:
    """A summary is long whatever its faithfulness: five sentences copied from the passage score about as one does
    (v4 weighed the claim count, −1.24 per log claim: 0.64 against 0.97; v7 scores them 0.83–0.93: the whole
    answer's best-sentence coverage, weighed more than in v6, falls as it grows), and one invented sentence among
    them still fails the answer."""
    judge = LocalJudge(use_minilm=False)
    passage = (
        "The Eiffel Tower was completed in 1889. It is 330 metres tall and stands in Paris. Gustave Eiffel's company "
        "designed and built the tower. It was the tallest structure in the world until 1930. About seven million "
        "people visit it every year."
    )
    sentences = text.sentences(passage)
    scores = []
    for n in range(1, len(sentences) + 1):
        result = await judge.score("faithfulness", RagSample(answer=" ".join(sentences[:n]), passages=[passage]))
        assert result.value is not None
        scores.append(result.value)
    assert min(scores) >= judge.faithfulness_threshold
    assert scores[0] - scores[-1] < 0.12, scores
    invented = " ".join([*sentences[:4], "It was designed by Frank Lloyd Wright."])
    result = await judge.score("faithfulness", RagSample(answer=invented, passages=[passage]))
    assert result.value is not None and result.value < judge.faithfulness_threshold


async def test_a_paraphrase_is_supported_and_an_invented_number_is_not() -> None:
    """v6. Reworded and reordered, the facts of the passages stay supported; a number the passages never state,
    where the closest sentence states another, is a contradiction and caps the answer — in a long answer too, where
    the soft minimum alone would let one wrong clause through."""
    judge = LocalJudge(use_minilm=False)

    async def judged(answer: str, question: str = "") -> tuple[float, list[Verdict]]:
        result = await judge.score("faithfulness", RagSample(question=question, answer=answer, passages=PASSAGES))
        assert result.value is not None
        return result.value, [c.verdict for c in result.claims]

    for paraphrase in ("In 1889 the Eiffel Tower was completed.", "It stands 330 metres tall in Paris."):
        value, verdicts = await judged(paraphrase)
        assert value >= judge.faithfulness_threshold and verdicts == [Verdict.SUPPORTED], paraphrase
    # the QA answer that is a span of the passage, and the one that restates the question around an invented name
    span, _ = await judged("Gustave Eiffel", "Who built the Eiffel Tower?")
    restated, _ = await judged("The Eiffel Tower was built by Frank Lloyd Wright.", "Who built the Eiffel Tower?")
    assert span >= judge.faithfulness_threshold > restated

    for wrong in ("It stands three hundred metres tall in Paris.", "The tower was completed in 1925."):
        value, verdicts = await judged(wrong)
        assert value < judge.faithfulness_threshold and verdicts == [Verdict.CONTRADICTED], wrong
    _, verdicts = await judged("It stands three hundred and thirty metres tall in Paris.")
    assert verdicts == [Verdict.SUPPORTED]  # the same number, written out
    value, verdicts = await judged("The tower was completed in 1889. It is 500 metres tall.")
    assert verdicts == [Verdict.SUPPORTED, Verdict.CONTRADICTED]
    assert value < judge.faithfulness_threshold


def test_a_contradicted_claim_caps_the_answer() -> None:
    logits = [3.0, 3.0, -1.0]
    soft = sigmoid(soft_min(logits, 3.0))
    assert soft > 0.5  # one weak clause of three: the soft minimum alone passes the answer
    plain = {"number_conflict": 0.0, "number_mismatch": 0.0, "negated_copy": 0.0}
    wrong = {**plain, "number_conflict": 1.0, "number_mismatch": 1.0}
    negated = {**plain, "negated_copy": 1.0}
    assert answer_probability(logits, 3.0) == pytest.approx(soft)
    assert answer_probability(logits, 3.0, [plain, plain, plain]) == pytest.approx(soft)
    # a wrong number caps the answer at its claim's own support …
    assert answer_probability(logits, 3.0, [plain, plain, wrong]) == pytest.approx(sigmoid(-1.0))
    assert answer_probability(logits, 3.0, [wrong, plain, plain]) == pytest.approx(soft)  # a cap above: no change
    # … and a negated copy, however well it is otherwise supported (it is a copy), at NEGATED_COPY_SUPPORT
    assert answer_probability(logits, 3.0, [negated, plain, plain]) == pytest.approx(NEGATED_COPY_SUPPORT)
    assert claim_support(negated, 3.0) == NEGATED_COPY_SUPPORT and claim_support(plain, 3.0) == sigmoid(3.0)


async def test_a_negation_put_into_a_copied_sentence_is_contradicted() -> None:
    """v6.1. "was not completed" copies "was completed" and says the opposite; v6 scored such answers 0.66–0.76, as
    the copies they are. A reply's opening "No," and a negation the passage itself has are not that."""
    judge = LocalJudge(use_minilm=False)

    async def judged(answer: str) -> tuple[float, list[Verdict]]:
        sample = RagSample(question="When was the Eiffel Tower completed?", answer=answer, passages=PASSAGES)
        result = await judge.score("faithfulness", sample)
        assert result.value is not None
        return result.value, [c.verdict for c in result.claims]

    for negated in (
        "The Eiffel Tower was not completed in 1889.",
        "The Eiffel Tower wasn't completed in 1889.",
        "The Eiffel Tower was never completed.",
        "It is not 330 metres tall.",
    ):
        value, verdicts = await judged(negated)
        assert value <= NEGATED_COPY_SUPPORT and verdicts == [Verdict.CONTRADICTED], negated
    value, verdicts = await judged("The Eiffel Tower was completed in 1889. It isn't 330 metres tall.")
    assert verdicts == [Verdict.SUPPORTED, Verdict.CONTRADICTED] and value <= NEGATED_COPY_SUPPORT
    value, _ = await judged("The Eiffel Tower was completed in 1889.")
    assert value >= judge.faithfulness_threshold

    index = SentenceIndex.build(["It was not only the longest tour, but one of the longest tours in rock history."])
    sentence = index.sentences[0]
    for claim in ("No, it was the longest tour.", "It was not only the longest tour."):
        assert not negated_copy(text.tokens(claim), sentence), claim  # a reply's "No"; the passage's own "not"
    assert negated_copy(
        text.tokens("It was not one of the longest tours."),
        SentenceIndex.build(["It was one of the longest tours."]).sentences[0],
    )


async def test_a_claim_that_names_what_the_passage_calls_it_is_supported() -> None:
    """v8. Reference text names its subject once and then says "it"; an answer names it again. v7.1 scored "The
    Eiffel Tower was completed in 1889" 0.469 against "The Eiffel Tower is … in Paris. It was completed in 1889",
    under its threshold, while "It was completed in 1889" scored 0.885."""
    passage = (
        "The Eiffel Tower is a wrought-iron lattice tower in Paris. It was completed in 1889 and is 330 metres tall. "
        "Its design came from the company of Gustave Eiffel."
    )
    assert text.passage_sentences(passage) == [
        "The Eiffel Tower is a wrought-iron lattice tower in Paris.",
        "The Eiffel Tower was completed in 1889 and is 330 metres tall.",
        "The Eiffel Tower design came from the company of Gustave Eiffel.",
    ]
    # the first word of a sentence is a name only beside another; a pronoun with no sentence before stays
    assert text.passage_sentences("Bananas are yellow. It is a fruit.") == ["Bananas are yellow.", "It is a fruit."]
    assert text.passage_sentences("It rains. They stay in.") == ["It rains.", "They stay in."]
    judge = LocalJudge(use_minilm=False)

    value = functools.partial(_probability, judge, question="Tell me about the Eiffel Tower.", passages=[passage])

    for supported in ("The Eiffel Tower was completed in 1889.", "The Eiffel Tower is 330 metres tall."):
        assert await value(supported) >= judge.faithfulness_threshold, supported
    for invented in ("The Eiffel Tower was completed in 1925.", "The Eiffel Tower was designed by Thomas Edison."):
        assert await value(invented) < judge.faithfulness_threshold, invented


async def test_one_threshold_decides_claims_and_answers_and_is_named_in_the_version() -> None:
    """Before v8 a claim threshold could be set apart from the answer's and changed claim verdicts without changing
    the version; now one threshold decides both, and one's own is in the version."""
    sample = RagSample(question="How tall is it?", answer="The Eiffel Tower is 330 metres tall.", passages=PASSAGES)
    default, strict = LocalJudge(use_minilm=False), LocalJudge(use_minilm=False, faithfulness_threshold=0.99)
    judged, held = await default.score("faithfulness", sample), await strict.score("faithfulness", sample)
    assert judged.value == held.value is not None and default.faithfulness_threshold <= judged.value < 0.99
    assert [c.verdict for c in judged.claims] == [Verdict.SUPPORTED]
    assert [c.verdict for c in held.claims] == [Verdict.UNSUPPORTED]
    assert strict.claim_threshold == strict.faithfulness_threshold == 0.99
    assert "@0.99:" in strict.version and "@" not in default.version
    with pytest.raises(TypeError):
        LocalJudge(use_minilm=False, claim_threshold=0.9)  # type: ignore[call-arg]


async def test_a_courtesy_to_the_user_is_not_judged_as_a_claim() -> None:
    """v7.1. An assistant's "Would you like to know more?" asserts nothing; v7 judged it as an unsupported claim, so a
    faithful answer that ended with one scored 0.002, below the same answer with a wrong year. A question about the
    subject is still judged."""
    judge = LocalJudge(use_minilm=False)

    value = functools.partial(_probability, judge, question="When was the Eiffel Tower completed?")

    plain = await value("The Eiffel Tower was completed in 1889.")
    for courteous in (
        "The Eiffel Tower was completed in 1889. Would you like to know more about its history?",
        "Great question! The Eiffel Tower was completed in 1889.",
        "The Eiffel Tower was completed in 1889. Let me know if you need anything else. Hope this helps!",
    ):
        assert await value(courteous) == plain, courteous
    assert await value("The Eiffel Tower was completed in 1925. Would you like to know more?") < plain
    assert text.split_claims("Do you like towers? It was built in 1889.") == [
        "Do you like towers?",
        "It was built in 1889.",
    ]
    # nothing but a courtesy: the answer is not emptied, and nothing supports it
    assert text.without_remarks_to_user("Would you like to know more?") == "Would you like to know more?"
    assert await value("Would you like to know more?") < judge.faithfulness_threshold


async def test_a_remark_to_the_user_inside_a_sentence_is_not_judged_as_a_claim() -> None:
    """v9.1. A courtesy or affirmation that opens or closes a sentence, set off by a comma or dash, is dropped as one
    that is a sentence of its own is: v9 scored "…, hope that helps!" 0.17 and "Great question, …" 0.30 where the
    same answers with a full stop scored 0.93. The claim around it is still judged, a wrong one included."""
    judge = LocalJudge(use_minilm=False)

    value = functools.partial(_probability, judge, question="When was the Eiffel Tower completed?")

    plain = await value("The Eiffel Tower was completed in 1889.")
    assert plain >= judge.faithfulness_threshold
    for remarked in (
        "The Eiffel Tower was completed in 1889, hope that helps!",
        "The Eiffel Tower was completed in 1889; let me know if you need anything else.",
        "The Eiffel Tower was completed in 1889 — feel free to ask more.",
        "Great question, the Eiffel Tower was completed in 1889.",
        "Good question - the Eiffel Tower was completed in 1889, and I hope this answers it.",
    ):
        assert await value(remarked) == pytest.approx(plain), remarked
    assert text.split_claims("Good question, the tower was built in 1889, let me know if you need more!") == [
        "the tower was built in 1889"
    ]
    # the whole answer's features read the claim alone too
    assert text.without_remarks_to_user("It was built in 1889; hope this helps.") == "It was built in 1889"
    # a hyphenated word is no dash
    assert text.split_claims("The well-known tower was built in 1889.") == ["The well-known tower was built in 1889."]
    # a remark does not rescue a wrong fact
    assert await value("The Eiffel Tower was completed in 1925, hope that helps!") < judge.faithfulness_threshold
    assert await value("Great question, the Eiffel Tower was completed in 1925.") < judge.faithfulness_threshold


async def test_an_affirmation_of_what_the_user_said_is_not_judged_as_a_claim() -> None:
    """v9. "I agree." or "Yes, that's true!" agrees with the user's turn and states nothing the passages could
    support; v8 judged it as an unsupported claim, so a reply that agreed and then stated a passage's fact scored
    0.14. A clause that agrees *that* something holds is still a claim, and so is a reaction ("That's so cool!")."""
    judge = LocalJudge(use_minilm=False)

    value = functools.partial(_probability, judge, question="The tower is really old, isn't it?")

    plain = await value("The Eiffel Tower was completed in 1889.")
    assert plain >= judge.faithfulness_threshold
    for affirmation in ("I agree.", "Yes, that's true!", "Exactly.", "Yeah, you're right.", "i agree with you ."):
        assert text.is_affirmation(affirmation), affirmation
        assert await value(f"{affirmation} The Eiffel Tower was completed in 1889.") == pytest.approx(plain)
    # after a comma or a dash as after a full stop (v9 before it landed: "I agree, …" 0.25, "I agree. …" 0.93)
    for opening in ("I agree, the", "Yes, that's true, the", "I agree with that - the"):
        assert await value(f"{opening} Eiffel Tower was completed in 1889.") == pytest.approx(plain)
    assert text.split_claims("Exactly, it was completed in 1889.") == ["it was completed in 1889."]
    # agreeing does not rescue a wrong fact
    assert await value("I agree. The Eiffel Tower was completed in 1925.") < judge.faithfulness_threshold
    assert await value("I agree, the Eiffel Tower was completed in 1925.") < judge.faithfulness_threshold
    agreeing_that = "I agree that the tower was built in 1925."
    assert text.split_claims(agreeing_that) == [agreeing_that]
    assert text.split_claims("That's so cool! It was built in 1889.") == ["That's so cool!", "It was built in 1889."]
    # nothing but an affirmation: the answer is not emptied, and nothing supports it
    assert await value("I agree.") < judge.faithfulness_threshold


@pytest.mark.skipif(not DEV_DATA.exists(), reason="../shared/data (the shared dev data) is absent")
def test_fitted_on_one_kind_the_judge_beats_overlap_on_the_other() -> None:
    """Issue 23's criterion, leave-one-kind-out on the fitting split with the shipped design (lexical v6 features,
    τ 3, L2 3): fitted on QA alone the judge scores dialogue above the overlap baseline fitted on the same rows, and
    fitted on dialogue alone QA too (v5: 0.332 against 0.564, 0.622 against 0.636)."""
    fit = _fit_script()
    rows = [r for r in load_rows(DEV_DATA) if not is_heldout(r.id)]
    data = fit.Featurised(rows, LocalJudge(use_minilm=False))
    model = MODELS["lexical"]
    everything = range(len(rows))
    for kind in ("begin", "halueval_qa"):
        train = [i for i in everything if data.kinds[i] != kind]
        test = [i for i in everything if data.kinds[i] == kind]
        judged, overlap = fit.judge_and_baseline(data, train, test, fit.L2["lexical"], model.temperature)[kind]
        assert judged > overlap, (kind, judged, overlap)


def test_a_kind_is_not_fitted_on_when_its_task_or_its_dataset_is_new() -> None:
    def row(dataset: str, task: str) -> LabelledRow:
        return LabelledRow(f"{dataset}-{task}", dataset, RagSample(answer="a", passages=["a"]), True, task)

    rows = [row("begin", "grounded_dialogue"), row("newqa", "qa"), row("summeval", "summarization"), row("x", "")]
    # a new corpus of a fitted task is fitted on; a summary is not; a row without a task goes by its dataset
    assert kinds_not_fitted_on(rows, FITTED_TASKS, ["begin"]) == ["summeval", "x"]


def test_calibrate_flags_summaries_the_judge_was_not_fitted_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ragmon.judges.local_judge, "load_minilm", lambda: None)
    rows = []
    for i in range(6):
        faithful = i % 2 == 0
        answer = "The tower was completed in 1889." if faithful else "The tower was painted green by Picasso."
        for dataset, task in (("begin", "grounded_dialogue"), ("summaries", "summarization")):
            rows.append(
                {
                    "id": f"{dataset}-{i}",
                    "dataset": dataset,
                    "task": task,
                    "question": "",
                    "context": PASSAGES,
                    "answer": answer,
                    "label": {"faithful": faithful},
                }
            )
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    parser = argparse.ArgumentParser()
    add_calibrate_arguments(parser)

    assert calibrate(parser.parse_args([str(path), "--json"])) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["kinds_not_fitted_on"] == ["summaries"]
    assert report["fitted_on"]["tasks"] == list(FITTED_TASKS)
    assert report["judge"] == f"local:{MODELS['lexical'].version}:lexical"

    assert calibrate(parser.parse_args([str(path)])) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("summaries *") for line in lines)
    assert not any(line.startswith("begin *") for line in lines)
    assert lines[-1].startswith("* not fitted on:") and "summaries" in lines[-1]
