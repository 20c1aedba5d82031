"""The local judge's claim-support models: logistic models over the named features of judges/support_features.py.

One model per feature set — "lexical" (no extra packages) and "minilm" (lexical plus MiniLM claim-to-sentence
similarity, when the `embeddings` extra is installed). Weights, bias and claim threshold were fitted once by
`python benchmarks/fit_local_judge.py ../shared/data/faithfulness/dev.jsonl --features NAME --print-constants` on
the fitting part of the dev data (rows whose sha256(id) % 10 < 7; the rest is held out, judges/calibration.py), not
at run time: the judge's behaviour is fixed by its version, and re-fitting on the data being scored would flatter
it. Changing any number here changes that model's version, which the judge records with every score.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SupportModel:
    version: str
    feature_set: str  # a key of support_features.FEATURE_SETS
    weights: Mapping[str, float]  # on raw features (not standardised at run time)
    bias: float
    claim_threshold: float  # support probability at or above which a claim is "supported"

    def probability(self, features: Mapping[str, float]) -> float:
        z = self.bias + sum(weight * features[name] for name, weight in self.weights.items())
        return 1.0 / (1.0 + math.exp(-z))


LEXICAL = SupportModel(
    version="lexical-lr-v2",
    feature_set="lexical",
    weights={
        "coverage": -0.5612,
        "sentence_coverage": 1.9623,
        "bigram_coverage": 0.4533,
        "number_mismatch": -0.7133,
        "name_miss": -5.0851,
        "negation_mismatch": -0.9766,
        "first_person": -0.6318,
        "second_person": -1.1414,
        "missing": -0.9837,
        "content_len": -0.3829,
        "longest_run": -0.6030,
        "novel_word_share": -4.9477,
        "long_word_coverage": 1.0099,
        "opinion": -1.1492,
        "question": -4.4657,
        "answer_overlap": 0.9198,
        "answer_claims": 0.6500,
        "coverage_over_0.5": -3.6983,
        "coverage_over_0.8": -9.5577,
        "coverage_over_0.95": -18.7408,
        "sentence_coverage_over_0.5": 3.9784,
        "sentence_coverage_over_0.8": 6.3268,
        "sentence_coverage_over_0.95": 12.3026,
        "longest_run_over_0.5": 0.4971,
        "longest_run_over_0.8": 4.3026,
        "longest_run_over_0.95": -8.6452,
        "novel_word_share_over_0.5": 2.6713,
        "novel_word_share_over_0.8": 4.0627,
        "novel_word_share_over_0.95": 26.0722,
        "bigram_coverage_over_0.5": 0.9186,
        "bigram_coverage_over_0.8": -2.4849,
        "bigram_coverage_over_0.95": 9.0287,
        "answer_overlap_over_0.5": -1.2955,
        "answer_overlap_over_0.8": 2.6977,
        "answer_overlap_over_0.95": -3.6538,
    },
    bias=0.5208,
    claim_threshold=0.4945,
)

MINILM = SupportModel(
    version="minilm-lr-v2",
    feature_set="minilm",
    weights={
        "coverage": -0.0892,
        "sentence_coverage": 2.0080,
        "bigram_coverage": 0.4882,
        "number_mismatch": -0.8114,
        "name_miss": -4.8803,
        "negation_mismatch": -0.8164,
        "first_person": -0.6032,
        "second_person": -1.1675,
        "missing": -0.5861,
        "content_len": -1.0276,
        "longest_run": -0.6729,
        "novel_word_share": -4.3117,
        "long_word_coverage": 1.1071,
        "opinion": -1.1092,
        "question": -4.6014,
        "answer_overlap": 0.7186,
        "answer_claims": 0.8154,
        "sim_sentence": -0.3708,
        "coverage_over_0.5": -3.4064,
        "coverage_over_0.8": -8.7159,
        "coverage_over_0.95": -16.6940,
        "sentence_coverage_over_0.5": 3.2302,
        "sentence_coverage_over_0.8": 5.0051,
        "sentence_coverage_over_0.95": 14.2185,
        "longest_run_over_0.5": 0.5601,
        "longest_run_over_0.8": 3.7450,
        "longest_run_over_0.95": -7.3665,
        "novel_word_share_over_0.5": 1.9356,
        "novel_word_share_over_0.8": 3.6847,
        "novel_word_share_over_0.95": 23.7077,
        "bigram_coverage_over_0.5": 0.7567,
        "bigram_coverage_over_0.8": -2.2553,
        "bigram_coverage_over_0.95": 7.9702,
        "answer_overlap_over_0.5": -0.7031,
        "answer_overlap_over_0.8": 3.8213,
        "answer_overlap_over_0.95": -5.8084,
        "sim_sentence_over_0.5": 2.0097,
        "sim_sentence_over_0.8": 9.1520,
        "sim_sentence_over_0.95": -17.6282,
    },
    bias=0.5136,
    claim_threshold=0.5032,
)

MODELS = {model.feature_set: model for model in (LEXICAL, MINILM)}
