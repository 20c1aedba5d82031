"""Confidence intervals and tests of a difference between two releases (`ragmon compare`, the canary analysis).

Each kind of figure gets the method that holds for it:

- a rate (errors, refusals, a document's share of a question's traces): Newcombe's hybrid score interval of the
  difference of two proportions (his method 10: from the two Wilson intervals), which keeps its coverage for small
  counts and rates near 0 or 1 where the plain normal interval does not; the test is the pooled two-proportion z test;
- a mean per request or per span (cost, tokens, top-1 score, similarity gap): Welch's normal interval, the two sample
  variances kept apart;
- a judged score weighted by inclusion probability: the two Hájek means' linearised variances
  (`ragmon.sinks.quality.weighted_estimate`) added, normal;
- a p95: distribution-free. Each release's p95 gets an order-statistic interval [x_(r), x_(s)] whose ranks come from
  the binomial(n, 0.95) law of how many values lie below the true p95 (exact for any continuous distribution), at
  97.5 % each; the delta's interval [lo_c − hi_b, hi_c − lo_b] then covers at least 95 % (Bonferroni over the two).

Every interval here is two-sided at 95 %. `holm` adjusts the p-values of the tests a canary analysis ran together.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

Z_95 = 1.959963984540054
_NORMAL = NormalDist()


def wilson(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson's score interval of a proportion."""
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


def newcombe(x_b: int, n_b: int, x_c: int, n_c: int, z: float = Z_95) -> tuple[float, float] | None:
    """Newcombe's hybrid score interval of p_c − p_b (candidate minus baseline); None without data on a side."""
    if n_b <= 0 or n_c <= 0:
        return None
    p_b, p_c = x_b / n_b, x_c / n_c
    l_b, u_b = wilson(x_b, n_b, z)
    l_c, u_c = wilson(x_c, n_c, z)
    delta = p_c - p_b
    low = delta - math.sqrt((p_c - l_c) ** 2 + (u_b - p_b) ** 2)
    high = delta + math.sqrt((u_c - p_c) ** 2 + (p_b - l_b) ** 2)
    return (max(-1.0, low), min(1.0, high))


def two_proportion_p(x_b: int, n_b: int, x_c: int, n_c: int) -> float | None:
    """Two-sided p-value of the pooled z test that both rates are equal (None without data on a side)."""
    if n_b <= 0 or n_c <= 0:
        return None
    pooled = (x_b + x_c) / (n_b + n_c)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n_b + 1 / n_c))
    if se == 0:
        return 1.0
    return normal_p((x_c / n_c - x_b / n_b) / se)


def normal_p(z: float) -> float:
    """Two-sided p-value of a standard normal statistic."""
    return 2 * (1 - _NORMAL.cdf(abs(z)))


def welch(
    mean_b: float, var_b: float, n_b: int, mean_c: float, var_c: float, n_c: int, z: float = Z_95
) -> tuple[tuple[float, float], float] | None:
    """Welch's normal interval of mean_c − mean_b and its test's p-value, from each side's sample variance."""
    if n_b < 2 or n_c < 2:
        return None
    se = math.sqrt(max(var_b, 0.0) / n_b + max(var_c, 0.0) / n_c)
    delta = mean_c - mean_b
    if se == 0:
        return ((delta, delta), 1.0 if delta == 0 else 0.0)
    return ((delta - z * se, delta + z * se), normal_p(delta / se))


def normal_difference(
    mean_b: float, var_b: float, mean_c: float, var_c: float, z: float = Z_95
) -> tuple[tuple[float, float], float]:
    """Normal interval of mean_c − mean_b from the variances *of the two means*, and its test's p-value."""
    se = math.sqrt(max(var_b, 0.0) + max(var_c, 0.0))
    delta = mean_c - mean_b
    if se == 0:
        return ((delta, delta), 1.0 if delta == 0 else 0.0)
    return ((delta - z * se, delta + z * se), normal_p(delta / se))


def _binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X ≤ k) for X ~ binomial(n, p), summed in log space (n up to millions: a normal approximation beyond 5000)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if n > 5000:
        mean, sd = n * p, math.sqrt(n * p * (1 - p))
        return _NORMAL.cdf((k + 0.5 - mean) / sd)
    log_p, log_q = math.log(p), math.log1p(-p)
    total = 0.0
    log_choose = 0.0  # log C(n, 0)
    for i in range(k + 1):
        if i > 0:
            log_choose += math.log(n - i + 1) - math.log(i)
        total += math.exp(log_choose + i * log_p + (n - i) * log_q)
    return min(total, 1.0)


def quantile_ranks(n: int, level: float = 0.95, confidence: float = 0.975) -> tuple[int, int] | None:
    """1-based ranks (r, s) with P(x_(r) ≤ the true `level` quantile ≤ x_(s)) ≥ `confidence`, as close to the
    estimate as that allows; None when n is too small for any such pair (a p95 at 97.5 % needs n ≥ 86)."""
    if n <= 0:
        return None
    tail = (1 - confidence) / 2
    # X = how many values lie below the true quantile ~ binomial(n, level). x_(r) ≤ q ⇔ X ≥ r; x_(s) ≥ q ⇔ X < s.
    # Largest r with P(X < r) ≤ tail, smallest s with P(X ≥ s) ≤ tail.
    centre = max(1, min(n, math.ceil(level * n)))
    r = centre
    while r >= 1 and _binomial_cdf(r - 1, n, level) > tail:
        r -= 1
    s = centre
    while s <= n and 1 - _binomial_cdf(s - 1, n, level) > tail:
        s += 1
    if r < 1 or s > n:
        return None
    return (r, s)


def quantile_rank(n: int, level: float = 0.95) -> int:
    """The 1-based rank of the point estimate (the smallest x with at least `level` of the values at or below it)."""
    return max(1, min(n, math.ceil(level * n)))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error control over the tests actually run), in input order."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for position, index in enumerate(order):
        running = max(running, min(1.0, (m - position) * p_values[index]))
        adjusted[index] = running
    return adjusted
