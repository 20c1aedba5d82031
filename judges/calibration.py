"""Agreement between a judge's faithfulness verdicts and human labels: accuracy, balanced accuracy, Cohen's
kappa, TPR/TNR ("faithful" is the positive class) and the ranking AUC, per dataset kind and overall, next to a
lexical-overlap baseline computed in the same run; for a judge whose score is P(faithful), its calibration too (mean
probability beside the faithful share, Brier score), which is what says whether its one threshold holds on a kind.

Rows are split by a fixed hash of their id into a fitting part (70 %) and a held-out part (30 %): thresholds and
features are chosen on the first, figures worth quoting come from the second. The judge's own threshold comes
from its config unless `fit_threshold` is asked for (then it is fitted on the fitting part of the rows given).
The baseline's threshold is always fitted on the fitting part — the baseline is allowed to be tuned; the judge
is not, which makes "beats the baseline" a fair claim.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ragmon.judges.lexical import overlap_baseline
from ragmon.judges.protocol import Judge
from ragmon.judges.types import RagSample

Split = Literal["all", "fit", "heldout"]
HELDOUT_BUCKETS = 3  # sha256(id) % 10 in {7, 8, 9}: held out


@dataclass(frozen=True, slots=True)
class LabelledRow:
    id: str
    dataset: str
    sample: RagSample
    faithful: bool
    task: str = ""  # dev.jsonl's `task` (grounded_dialogue, qa, …): what kind of text the answer is
    subset: str = ""  # the source within the dataset (BEGIN's wow / cmu / tc, a SummEdits domain)
    # Rows made from one source document share a group (a summary and its edits): the split follows it, so no
    # document is on both sides. Without one, a row is its own group.
    group: str = ""

    @property
    def split_key(self) -> str:
        return self.group or self.id


def is_heldout(key: str) -> bool:
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 10 >= 10 - HELDOUT_BUCKETS


def in_split(key: str, split: Split) -> bool:
    """Whether the row with this split key (`LabelledRow.split_key`) is in `split`."""
    return split == "all" or is_heldout(key) == (split == "heldout")


def load_rows(path: str | Path, split: Split = "all") -> list[LabelledRow]:
    """Rows with a boolean `label.faithful` (null ones are skipped), optionally one part of the split; a path
    ending in .gz is read through gzip."""
    rows = []
    path = Path(path)
    with gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            raw = json.loads(line)
            faithful = (raw.get("label") or {}).get("faithful")
            if not isinstance(faithful, bool):
                continue
            row_id, group = str(raw["id"]), str(raw.get("group") or "")
            if not in_split(group or row_id, split):
                continue
            context = raw.get("context") or []
            sample = RagSample(
                question=str(raw.get("question") or ""),
                answer=str(raw.get("answer") or ""),
                passages=[context] if isinstance(context, str) else [str(c) for c in context],
            )
            dataset = str(raw.get("dataset") or "unknown")
            task, subset = str(raw.get("task") or ""), str(raw.get("subset") or "")
            rows.append(LabelledRow(row_id, dataset, sample, faithful, task, subset, group))
    return rows


def agreement(labels: Sequence[bool], predictions: Sequence[bool]) -> dict[str, float | int | None]:
    """Agreement figures; None where undefined (e.g. TPR with no positive label, kappa when p_e = 1)."""
    n = len(labels)
    tp = sum(1 for y, p in zip(labels, predictions, strict=True) if y and p)
    tn = sum(1 for y, p in zip(labels, predictions, strict=True) if not y and not p)
    positives = sum(labels)
    negatives = n - positives
    if n == 0:
        return {"n": 0, "accuracy": None, "balanced_accuracy": None, "kappa": None, "tpr": None, "tnr": None}
    accuracy = (tp + tn) / n
    tpr = tp / positives if positives else None
    tnr = tn / negatives if negatives else None
    balanced = (tpr + tnr) / 2 if tpr is not None and tnr is not None else None
    predicted_positive = sum(predictions) / n
    expected = (positives / n) * predicted_positive + (negatives / n) * (1 - predicted_positive)
    kappa = (accuracy - expected) / (1 - expected) if expected < 1 else None
    return {"n": n, "accuracy": accuracy, "balanced_accuracy": balanced, "kappa": kappa, "tpr": tpr, "tnr": tnr}


def fit_threshold(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """The threshold t (faithful iff score ≥ t) with the highest Cohen's kappa; the lowest such t on ties."""
    best_t, best_k = 0.5, float("-inf")
    for t in sorted(set(scores)):
        kappa = agreement(labels, [s >= t for s in scores])["kappa"]
        if kappa is not None and kappa > best_k:
            best_t, best_k = t, kappa
    return best_t


def ranking_auc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """The chance that a faithful row outscores an unfaithful one (ties count half): how well the scores rank,
    whatever the threshold. None without both labels."""
    positives = sum(labels)
    negatives = len(labels) - positives
    if not positives or not negatives:
        return None
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    start = 0
    while start < len(order):  # average ranks over ties
        end = start
        while end + 1 < len(order) and scores[order[end + 1]] == scores[order[start]]:
            end += 1
        for k in range(start, end + 1):
            ranks[order[k]] = (start + end) / 2 + 1
        start = end + 1
    rank_sum = sum(r for r, y in zip(ranks, labels, strict=True) if y)
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


def probability_calibration(scores: Sequence[float], labels: Sequence[bool]) -> dict[str, float | None]:
    """For a score that claims to be P(faithful): its mean beside the faithful share (equal when calibrated in the
    large — what lets one threshold mean the same on every kind) and the Brier score (mean squared error, 0 is
    perfect, 0.25 is a constant ½). An unscored row counts as 0."""
    if not scores:
        return {"mean_score": None, "faithful_share": None, "brier": None}
    clipped = [min(max(s, 0.0), 1.0) for s in scores]
    return {
        "mean_score": sum(clipped) / len(clipped),
        "faithful_share": sum(labels) / len(labels),
        "brier": sum((s - y) ** 2 for s, y in zip(clipped, labels, strict=True)) / len(clipped),
    }


def _figures(labels: Sequence[bool], scores: Sequence[float], threshold: float, probability: bool) -> dict[str, Any]:
    figures: dict[str, Any] = {
        **agreement(labels, [s >= threshold for s in scores]),
        "auc": ranking_auc(scores, labels),
    }
    if probability:
        figures["calibration"] = probability_calibration(scores, labels)
    return figures


def _report(
    rows: Sequence[LabelledRow], scores: Sequence[float], threshold: float, probability: bool = False
) -> dict[str, Any]:
    labels = [r.faithful for r in rows]
    report: dict[str, Any] = {**_figures(labels, scores, threshold, probability), "threshold": threshold}
    by_kind: dict[str, Any] = {}
    for kind in sorted({r.dataset for r in rows}):
        picked = [(r.faithful, s) for r, s in zip(rows, scores, strict=True) if r.dataset == kind]
        by_kind[kind] = _figures([y for y, _ in picked], [s for _, s in picked], threshold, probability)
    report["by_dataset"] = by_kind
    return report


def kinds_not_fitted_on(
    rows: Sequence[LabelledRow], fitted_tasks: Iterable[str], fitted_datasets: Iterable[str]
) -> list[str]:
    """The kinds (datasets) of `rows` a judge was not fitted on: a kind whose rows carry a task the judge's fitting
    data lacked (a summary is not a dialogue turn, whatever the corpus), or, for rows without a task, a dataset
    name the fitting data lacked. Its figures say how the judge does there; its threshold was never tuned there."""
    tasks, datasets = set(fitted_tasks), set(fitted_datasets)
    out = []
    for kind in sorted({r.dataset for r in rows}):
        members = [r for r in rows if r.dataset == kind]
        if any((r.task not in tasks) if r.task else (r.dataset not in datasets) for r in members):
            out.append(kind)
    return out


async def score_rows(judge: Judge, rows: Sequence[LabelledRow], concurrency: int = 8) -> list[float | None]:
    prepare = getattr(judge, "prepare", None)
    if callable(prepare):  # a judge that can batch its work ahead (the local judge's embeddings) does it once
        await asyncio.to_thread(prepare, [r.sample for r in rows])
    slots = asyncio.Semaphore(concurrency)

    async def one(row: LabelledRow) -> float | None:
        async with slots:
            return (await judge.score("faithfulness", row.sample)).value

    return list(await asyncio.gather(*(one(r) for r in rows)))


async def calibrate(
    judge: Judge,
    rows: Sequence[LabelledRow],
    *,
    threshold: float | None = None,
    fit: bool = False,
    split: Split = "all",
) -> dict[str, Any]:
    """Score `rows` (all of them: fitting needs the fitting part) and report on the `split` asked for."""
    values = await score_rows(judge, rows)
    # An unscored row (empty answer, no passages, judge error) is predicted "not faithful" and counted: dropping
    # it would flatter the judge.
    scores = [v if v is not None else float("-inf") for v in values]
    fitting = [i for i, r in enumerate(rows) if in_split(r.split_key, "fit")]
    if fit:
        chosen = fit_threshold([scores[i] for i in fitting], [rows[i].faithful for i in fitting]) if fitting else 0.5
    else:
        chosen = threshold if threshold is not None else judge.faithfulness_threshold
    baseline_scores = [overlap_baseline(r.sample.answer, r.sample.passages) for r in rows]
    base_fit = fitting or list(range(len(rows)))
    baseline_t = fit_threshold([baseline_scores[i] for i in base_fit], [rows[i].faithful for i in base_fit])
    report_idx = [i for i, r in enumerate(rows) if in_split(r.split_key, split)]
    picked = [rows[i] for i in report_idx]
    # A judge whose score is P(faithful) (the local judge's, v4 on) is also read for calibration.
    probability = bool(getattr(judge, "score_is_probability", False))
    out = _report(picked, [scores[i] for i in report_idx], chosen, probability)
    out["judge"] = judge.version
    out["split"] = split
    out["threshold_source"] = "fitted on the fitting split" if fit else ("given" if threshold is not None else "config")
    out["unscored"] = sum(1 for i in report_idx if values[i] is None)
    fitted_on = getattr(judge, "fitted_on", None)  # (tasks, datasets) for a judge fitted on labelled data
    if fitted_on is not None:
        out["fitted_on"] = {"tasks": list(fitted_on[0]), "datasets": list(fitted_on[1])}
        out["kinds_not_fitted_on"] = kinds_not_fitted_on(picked, *fitted_on)
    out["baseline"] = {
        "method": "token overlap (share of answer words in the passages), threshold fitted on the fitting split",
        **_report(picked, [baseline_scores[i] for i in report_idx], baseline_t),
    }
    return out


def format_report(report: dict[str, Any]) -> str:
    def fmt(x: Any) -> str:
        return "  n/a" if x is None else f"{x:5.3f}" if isinstance(x, float) else str(x)

    unfitted = set(report.get("kinds_not_fitted_on", ()))
    # wide enough for the longest kind name and its " *", so no name runs into the next column
    width = max([14, *(len(kind) + 4 for kind in report["by_dataset"])])
    lines = [
        f"judge {report['judge']}  split {report['split']}  threshold {report['threshold']:.3f} "
        f"({report['threshold_source']})  unscored {report['unscored']}",
        f"{'kind':<{width}}{'who':<10}{'n':>6}{'acc':>7}{'bal':>7}{'kappa':>7}{'tpr':>7}{'tnr':>7}{'auc':>7}"
        + ("  mean P / faithful share, Brier" if "calibration" in report else ""),
    ]

    def row(kind: str, who: str, figures: dict[str, Any]) -> str:
        keys = ("accuracy", "balanced_accuracy", "kappa", "tpr", "tnr", "auc")
        cells = "".join(f"{fmt(figures[k]):>7}" for k in keys)
        calibration = figures.get("calibration")
        if calibration and calibration["mean_score"] is not None:
            cells += (
                f"  {calibration['mean_score']:.3f} / {calibration['faithful_share']:.3f}, {calibration['brier']:.3f}"
            )
        return f"{kind:<{width}}{who:<10}{figures['n']:>6}{cells}"

    kinds: Iterable[str] = report["by_dataset"]
    for kind in [*kinds, "overall"]:
        judge_figures = report if kind == "overall" else report["by_dataset"][kind]
        base_figures = report["baseline"] if kind == "overall" else report["baseline"]["by_dataset"][kind]
        lines.append(row(f"{kind} *" if kind in unfitted else kind, "judge", judge_figures))
        lines.append(row("", "overlap", base_figures))
    lines.append(
        f"baseline threshold {report['baseline']['threshold']:.3f} (token overlap, fitted on the fitting split)"
    )
    if unfitted:
        tasks = ", ".join(report["fitted_on"]["tasks"])
        lines.append(
            f"* not fitted on: the judge was fitted on {tasks} rows only; its threshold was never tuned on "
            f"{', '.join(sorted(unfitted))}, so nothing promises the figures above carry over to it"
        )
    return "\n".join(lines)
