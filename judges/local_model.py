"""The local judge's claim-support model: a logistic model over the lexical features of judges/lexical.py.

The weights were fitted once on the fitting part of the dev data (rows whose sha256(id) % 10 < 7; the rest
is held out, see judges/calibration.py) by `ragmon calibrate` developers, not at run time: the judge's
behaviour is fixed by its version, and re-fitting it on the data being scored would flatter it. Changing any
number here changes LOCAL_MODEL_VERSION.
"""

from __future__ import annotations

import math

from judges.lexical import ClaimFeatures

LOCAL_MODEL_VERSION = "lexical-lr-v1"

# Raw-feature weights (features are not standardised at run time) and the intercept.
WEIGHTS: dict[str, float] = {
    "coverage": 0.6473,
    "sentence_coverage": 1.6378,
    "bigram_coverage": 1.0160,
    "number_mismatch": -0.7351,
    "name_miss": -2.5945,
    "negation_mismatch": -1.0269,
    "first_person": -1.1488,
    "second_person": -1.5621,
    "missing": -1.0016,
    "content_len": -0.3989,
    "longest_run": 1.4390,
}
BIAS = -1.5748
CLAIM_THRESHOLD = 0.45  # support probability at or above which a claim is "supported"


def support_probability(features: ClaimFeatures) -> float:
    z = BIAS + sum(WEIGHTS[name] * getattr(features, name) for name in WEIGHTS)
    return 1.0 / (1.0 + math.exp(-z))
