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

    def answer_probability(self, claim_logits: Sequence[float]) -> float:
        """The probability that an answer with these claims is faithful (graded; the verdict is ≥ claim_threshold)."""
        return sigmoid(soft_min(claim_logits, self.temperature))


# v4: the v3 features refitted for the soft-minimum answer rule (τ 3) at L2 3, chosen by the transfer table of
# benchmarks/fit_local_judge.py (design log there): in-kind figures as v3's, leave-one-kind-out no worse.
# v5: v4 without the claim count (support_features.LENGTH_FEATURES), which had made long answers score low whatever
# their support.
LEXICAL = SupportModel(
    version="lexical-lr-v5",
    feature_set="lexical",
    weights={
        "coverage": 0.2140,
        "sentence_coverage": 1.0642,
        "bigram_coverage": 1.5925,
        "number_mismatch": 0.0858,
        "name_miss": -4.1640,
        "negation_mismatch": -0.8625,
        "first_person": -0.5761,
        "second_person": -1.1252,
        "missing": -0.1327,
        "content_len": -0.2234,
        "longest_run": -0.8162,
        "novel_word_share": -0.9334,
        "long_word_coverage": 0.9955,
        "opinion": -1.1664,
        "question": -3.6720,
        "answer_overlap": -0.5738,
        "window_coverage": 0.4254,
        "question_share": -4.9807,
        "best_sentence_missing": -0.9762,
        "sentence_bigram_coverage": -1.6911,
        "number_conflict": -1.6662,
        "reply_opener": -0.2605,
        "length_ratio": 0.1486,
        "aligned_share": 0.7527,
        "order_swaps": -0.2031,
        "answer_novel_share": -0.9042,
        "answer_sentence_coverage": 1.0253,
        "coverage_over_0.5": -1.6192,
        "coverage_over_0.8": -5.6959,
        "coverage_over_0.95": -14.0693,
        "sentence_coverage_over_0.5": 1.1440,
        "sentence_coverage_over_0.8": 1.0107,
        "sentence_coverage_over_0.95": 2.9593,
        "longest_run_over_0.5": 0.0354,
        "longest_run_over_0.8": 3.1824,
        "longest_run_over_0.95": -10.2169,
        "novel_word_share_over_0.5": -1.5975,
        "novel_word_share_over_0.8": 3.0314,
        "novel_word_share_over_0.95": 26.0388,
        "bigram_coverage_over_0.5": 1.2109,
        "bigram_coverage_over_0.8": -0.8014,
        "bigram_coverage_over_0.95": 0.7918,
        "answer_overlap_over_0.5": 0.0263,
        "answer_overlap_over_0.8": 1.5219,
        "answer_overlap_over_0.95": 5.3148,
        "aligned_share_over_0.5": 3.4839,
        "aligned_share_over_0.8": 2.3637,
        "aligned_share_over_0.95": 1.6750,
    },
    bias=-1.1568,
    claim_threshold=0.5314,
    temperature=3.0,
)

# v3.1: v3's weights (not refitted: the embeddings extra is heavy for the shared box), scored as lexical v4 and v5
# score — the answer's value is its probability (here its weakest claim's support, τ 0), no longer the supported share.
MINILM = SupportModel(
    version="minilm-lr-v3.1",
    feature_set="minilm",
    weights={
        "coverage": -0.2499,
        "sentence_coverage": 0.5244,
        "bigram_coverage": 1.0134,
        "number_mismatch": -0.0939,
        "name_miss": -3.7592,
        "negation_mismatch": -0.8540,
        "first_person": -0.5490,
        "second_person": -0.9613,
        "missing": 0.0111,
        "content_len": -0.4964,
        "longest_run": -0.6610,
        "novel_word_share": -0.4885,
        "long_word_coverage": 1.0211,
        "opinion": -0.9703,
        "question": -3.2881,
        "answer_overlap": 0.1754,
        "answer_claims": 0.4333,
        "window_coverage": -0.0618,
        "question_share": -4.1020,
        "best_sentence_missing": -0.7186,
        "sentence_bigram_coverage": -1.1253,
        "number_conflict": -1.6661,
        "reply_opener": -0.1952,
        "length_ratio": -0.4727,
        "aligned_share": 0.4522,
        "order_swaps": -0.4223,
        "answer_novel_share": -1.0493,
        "answer_sentence_coverage": 1.0610,
        "sim_sentence": 1.8437,
        "coverage_over_0.5": -1.2708,
        "coverage_over_0.8": -4.2764,
        "coverage_over_0.95": -8.9398,
        "sentence_coverage_over_0.5": 1.1641,
        "sentence_coverage_over_0.8": 1.3012,
        "sentence_coverage_over_0.95": 5.8909,
        "longest_run_over_0.5": 0.1421,
        "longest_run_over_0.8": 2.8215,
        "longest_run_over_0.95": -8.5596,
        "novel_word_share_over_0.5": -0.2930,
        "novel_word_share_over_0.8": 3.6364,
        "novel_word_share_over_0.95": 19.6294,
        "bigram_coverage_over_0.5": 1.1736,
        "bigram_coverage_over_0.8": -0.5398,
        "bigram_coverage_over_0.95": 0.6584,
        "answer_overlap_over_0.5": 0.1440,
        "answer_overlap_over_0.8": 2.0021,
        "answer_overlap_over_0.95": -4.3103,
        "aligned_share_over_0.5": 2.9741,
        "aligned_share_over_0.8": 2.2988,
        "aligned_share_over_0.95": 8.3218,
    },
    bias=-1.4059,
    claim_threshold=0.4832,
)

MODELS = {model.feature_set: model for model in (LEXICAL, MINILM)}
