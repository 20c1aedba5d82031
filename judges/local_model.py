"""The local judge's claim-support models: logistic models over the named features of judges/support_features.py.

One model per feature set — "lexical" (no extra packages; v3 added the alignment features of judges/alignment.py,
v4 fits them for a graded answer probability, a soft minimum of the claims' logits, and v5 drops the claim count)
and "minilm" (v3: the lexical v3 features plus MiniLM claim-to-sentence similarity, when the `embeddings` extra is
installed). Weights, bias, threshold and temperature were fitted or chosen once by
`python benchmarks/fit_local_judge.py ../shared/data/faithfulness/dev.jsonl --features NAME --print-constants` on
the fitting part of the dev data (rows whose sha256(id) % 10 < 7; the rest is held out, judges/calibration.py), not
at run time: the judge's behaviour is fixed by its version, and re-fitting on the data being scored would flatter
it. Changing any number here changes that model's version, which the judge records with every score.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ragmon.judges.alignment import COPY_COVERAGE

# The tasks of the rows the shipped models were fitted on (dev.jsonl's `task`): `ragmon calibrate` flags any other
# kind as one the judge was not fitted on, since nothing says its figures carry over.
FITTED_TASKS = ("grounded_dialogue", "qa")
FITTED_DATASETS = ("begin", "halueval_qa")


def sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def soft_min(logits: Sequence[float], temperature: float) -> float:
    """-τ·log(mean(exp(-z/τ))): the mean of the claims' logits at large τ, their minimum as τ → 0 (τ = 0 is the
    minimum). One weak claim among several pulls an answer down without vetoing it, so an answer that compresses or
    paraphrases (several claims each a little short of "supported") is not failed for its weakest clause alone."""
    if temperature <= 0:
        return min(logits)
    scaled = [-z / temperature for z in logits]
    top = max(scaled)
    log_mean = top + math.log(sum(math.exp(u - top) for u in scaled) / len(scaled))
    return -temperature * log_mean


@dataclass(frozen=True, slots=True)
class SupportModel:
    version: str
    feature_set: str  # a key of support_features.FEATURE_SETS
    weights: Mapping[str, float]  # on raw features (not standardised at run time)
    bias: float
    # A claim is "supported" when its support is at or above this, and an answer faithful when its probability is:
    # one scale, since a one-claim answer's probability is its claim's support.
    claim_threshold: float
    # How claims combine into an answer: 0 is v3's "every claim supported" (the answer's support is its weakest
    # claim's); above 0, the answer's probability is sigmoid(soft_min(claim logits, τ)), fitted on answer labels.
    temperature: float = 0.0

    def logit(self, features: Mapping[str, float]) -> float:
        return self.bias + sum(weight * features[name] for name, weight in self.weights.items())

    def probability(self, features: Mapping[str, float]) -> float:
        return sigmoid(self.logit(features))

    def answer_probability(
        self, claim_logits: Sequence[float], claim_features: Sequence[Mapping[str, float]] = ()
    ) -> float:
        """The probability that an answer with these claims is faithful (graded; the verdict is ≥ claim_threshold),
        at most any claim's cap (`claim_cap`, from the claim's features): the soft minimum lets one weak clause of
        a long answer through, and a claim the passages contradict is not weak but wrong."""
        return answer_probability(claim_logits, self.temperature, claim_features)


def answer_probability(
    claim_logits: Sequence[float], temperature: float, claim_features: Sequence[Mapping[str, float]] = ()
) -> float:
    """`SupportModel.answer_probability` at any temperature (the fitting script's folds try several)."""
    probability = sigmoid(soft_min(claim_logits, temperature))
    caps = [claim_cap(f, z) for z, f in zip(claim_logits, claim_features, strict=False)]
    return min([probability, *(c for c in caps if c is not None)])


# v6.1: the most a claim that copies a passage sentence with a negation put into it can be supported (and so its
# answer be faithful). Set, not fitted: one claim of the fitting split has it (in an unfaithful QA answer), far too
# few for a weight; its own support is that of the copy it is (0.72–0.76 on the tests' negated sentences).
NEGATED_COPY_SUPPORT = 0.1


def claim_support(features: Mapping[str, float], logit: float) -> float:
    """The claim's support: sigmoid of its logit, at most NEGATED_COPY_SUPPORT for a negated copy."""
    support = sigmoid(logit)
    return min(support, NEGATED_COPY_SUPPORT) if negated_copy(features) else support


# The features `claim_cap` reads: all a caller must keep of a claim's row to cap its answer later (the fitting script).
CAP_FEATURES = ("number_conflict", "number_mismatch", "negated_copy")


def claim_cap(features: Mapping[str, float], logit: float) -> float | None:
    """The most an answer holding this claim can score, or None: a contradicted claim's own support. v6: a wrong
    number (the dev data has too few for a weight to learn that it is wrong, not weak); v6.1: a negated copy."""
    if wrong_number(features) or negated_copy(features):
        return claim_support(features, logit)
    return None


def negated_copy(features: Mapping[str, float]) -> bool:
    """The claim copies its closest passage sentence with a negation put into it (judges/alignment.negated_copy)."""
    return bool(features.get("negated_copy"))


def wrong_number(features: Mapping[str, float]) -> bool:
    """The claim states a number no passage states, where its closest passage sentence states another ("completed
    in 1925" against "completed in 1889"): a contradiction, not a claim that merely goes beyond the passages."""
    return bool(features["number_conflict"] and features["number_mismatch"])


def contradicts(features: Mapping[str, float]) -> bool:
    """A wrong number, or a claim that matches one passage sentence closely (shares ≥ 80 % of its content stems)
    but not on a negation or a number no passage states. Only the wrong number caps the answer's probability: a
    negation "mismatch" is too often a reply's "no, but …" or a passage's "not only" (25 faithful BEGIN answers of
    the fitting split have one), so it only names an unsupported claim's verdict."""
    if wrong_number(features) or negated_copy(features):
        return True
    disagrees = features["negation_mismatch"] or features["number_mismatch"]
    return bool(disagrees) and features["sentence_coverage"] >= COPY_COVERAGE


# v4: the v3 features refitted for the soft-minimum answer rule (τ 3) at L2 3, chosen by the transfer table of
# benchmarks/fit_local_judge.py (docs/design/local-judge.md): in-kind figures as v3's, leave-one-kind-out no worse.
# v5: v4 without the claim count (answer_claims), which had made long answers score low whatever
# their support.
# v6: 19 features chosen by leave-one-kind-out (support_features.TRANSFER_FEATURES), among them the coverage of what
# the claim adds to the question (new_word_coverage); same rule (τ 3) and penalty (L2 3). Fitted on one kind, it
# beats the overlap baseline on the other both ways, which v5 did not; pooled figures as v5's.
# v6.1: v6's weights; a negated copy of a passage sentence is contradicted (claim_support, claim_cap).
# v7: chat text split into claims whatever its case ("yes. it was released in 2010" is two sentences), and one more
# feature, the claim's best root coverage in one passage sentence (alignment.sentence_root_coverage); refitted (L2 3,
# τ 3): leave-one-kind-out on QA and leave-one-source-out on Wizard of Wikipedia rose (docs/design/local-judge.md).
# v7.1: a courtesy to the user ("Would you like to know more?", text.is_courtesy) is no claim and no part of the answer
# the features read; v7 judged it as an unsupported claim, so a faithful answer ending with one scored 0.002. One
# answer of the dev data has one ("Good question !"), so the refit moved the weights by a few thousandths; a RAG
# assistant's answers hold courtesies often, dialogue and QA corpora hardly ever.
# v8: a passage sentence that opens with a pronoun reads with the sentence before's first names in its place
# (text.passage_sentences), so "The Eiffel Tower was completed in 1889" meets "… It was completed in 1889" (v7.1:
# 0.469, under the threshold; v8: 0.933); a negated contraction ("isn't") is a negation, not a content word.
# Refitted at L2 3, τ 3; the weights moved by at most 0.27 (coverage_over_0.8), most by under 0.07.
# v9: an affirmation of what the user said ("I agree.", "Yes, that's true!", text.is_affirmation) is no claim and no
# part of the answer the features read, as a courtesy is; v8 judged it as an unsupported claim, so "I agree. He's been
# the Patriots' most indispensable player after Tom Brady." scored 0.14 beside the passage that says so; so is one
# that opens a sentence before a comma ("I agree, the tower …": text.without_remark_clauses). Refitted at L2 3,
# τ 3: every cell of the transfer table moved up or stayed (docs/design/local-judge.md, v9).
# v9.1: v9's weights; a remark to the user inside a sentence, set off by a comma or dash, is no claim either: a
# courtesy or pleasantry opening it ("Great question, the tower …") or an offer closing it ("… tall, hope that helps!",
# text.without_remark_clauses). v9 scored those 0.30 and 0.17 beside 0.93 for the same answers with a full stop. No
# answer of the dev data, the audit or SummEdits has one, so every figure is v9's; a RAG assistant's answers often do.
LEXICAL = SupportModel(
    version="lexical-lr-v9.1",
    feature_set="lexical",
    weights={
        "answer_overlap": 0.7570,
        "answer_sentence_coverage": 0.9030,
        "sentence_coverage": -3.2011,
        "long_word_coverage": 0.7777,
        "aligned_share": 2.9445,
        "novel_word_share": -0.7496,
        "new_word_coverage": 1.9555,
        "best_sentence_missing": -1.4965,
        "order_swaps": -0.7588,
        "question_share": -5.1036,
        "name_miss": -3.7227,
        "number_conflict": -1.9452,
        "negation_mismatch": -0.9691,
        "opinion": -1.2390,
        "first_person": -0.5345,
        "second_person": -1.2438,
        "question": -3.8127,
        "reply_opener": -0.3653,
        "coverage_over_0.8": -4.1297,
        "sentence_root_coverage": 1.8046,
    },
    bias=-2.4911,
    claim_threshold=0.5245,
    temperature=3.0,
)

# v6: the lexical v6 features plus the claim-to-sentence similarity, refitted for the soft-minimum rule (τ 3) and the
# wrong-number cap at L2 6, the least penalty at which it beats the overlap baseline leave-one-kind-out. It does not
# beat lexical v6 in any regime (docs/design/local-judge.md).
# v6.1: as lexical v6.1. v7: lexical v7's features and claims plus the similarity, refitted at L2 6 (still the least
# penalty that beats overlap leave-one-kind-out on BEGIN). v7.1: as lexical v7.1. v8: lexical v8's passage sentences,
# refitted at L2 10, again the least penalty that beats overlap leave-one-kind-out on BEGIN. v9: lexical v9's claims
# (an affirmation is none), refitted at L2 10.
# v9.1: as lexical v9.1.
MINILM = SupportModel(
    version="minilm-lr-v9.1",
    feature_set="minilm",
    weights={
        "answer_overlap": 0.4837,
        "answer_sentence_coverage": 0.2230,
        "sentence_coverage": -1.3117,
        "long_word_coverage": 0.7446,
        "aligned_share": 1.9941,
        "novel_word_share": -0.8895,
        "new_word_coverage": 1.3441,
        "best_sentence_missing": -1.2629,
        "order_swaps": -0.9643,
        "question_share": -3.5777,
        "name_miss": -2.5853,
        "number_conflict": -1.8106,
        "negation_mismatch": -0.9836,
        "opinion": -1.0614,
        "first_person": -0.5872,
        "second_person": -1.1764,
        "question": -2.6609,
        "reply_opener": -0.3014,
        "coverage_over_0.8": -1.6590,
        "sentence_root_coverage": 1.3336,
        "sim_sentence": 0.2399,
    },
    bias=-2.1699,
    claim_threshold=0.5054,
    temperature=3.0,
)

MODELS = {model.feature_set: model for model in (LEXICAL, MINILM)}
# The thresholds of earlier versions whose score was already a probability (v4 on; MiniLM v3.1), so labels paired
# with scores a store kept from them are still read at the threshold those scores were made for
# (judges/label_agreement.py).
RETIRED_THRESHOLDS = {
    "lexical-lr-v4": 0.5064,
    "lexical-lr-v5": 0.5314,
    "minilm-lr-v3.1": 0.4832,
    "lexical-lr-v6": 0.5694,
    "minilm-lr-v6": 0.5083,
    "lexical-lr-v6.1": 0.5694,
    "minilm-lr-v6.1": 0.5083,
    "minilm-lr-v6.2": 0.5083,
    "lexical-lr-v7": 0.543,
    "minilm-lr-v7": 0.5172,
    "lexical-lr-v7.1": 0.5424,
    "minilm-lr-v7.1": 0.5378,
    "lexical-lr-v8": 0.5386,
    "minilm-lr-v8": 0.5047,
    "lexical-lr-v9": 0.5245,
    "minilm-lr-v9": 0.5054,
}
