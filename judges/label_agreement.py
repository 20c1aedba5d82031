"""The judge's agreement with people's labels of production traces, per metric and judge version: what
`ragmon calibrate --from-store` prints and the dashboard shows beside judged quality.

Input: one row per (label, judge version that scored the labelled trace) — `Store.labelled_scores`. The judge's
verdict is its score at or above a threshold: `--threshold` when given, else the threshold the judge version
decides with (`default_threshold`). Figures are `calibration.agreement`'s (accuracy, balanced accuracy, Cohen's
kappa, TPR/TNR, the label's good side — faithful, relevant — as the positive class) and the confusion matrix.

A label counts once per reviewer: two people's labels of one trace are two observations. A trace the judge failed
on (no value) is counted as a "not" verdict, as `ragmon calibrate` counts unscored rows: leaving it out would
flatter the judge. Below `MIN_LABELS` labels a figure comes with a warning: with 30 labels a kappa of 0.6 has a
95 % interval about ±0.3 wide.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ragmon.judges.calibration import agreement
from ragmon.judges.local_model import MODELS, RETIRED_THRESHOLDS

MIN_LABELS = 30
DEFAULT_THRESHOLD = 0.5


def default_threshold(metric: str, judge_version: str) -> float:
    """The threshold `judge_version` decides `metric` with: a local judge's faithfulness model has its own
    (`local:<model version>:<embedding>`), or the one its settings gave it (`local:<model version>@<threshold>:…`);
    every other score reads as passing at 0.5."""
    parts = judge_version.split(":")
    if metric == "faithfulness" and len(parts) >= 2 and parts[0] == "local":
        model_version, _, threshold = parts[1].partition("@")
        if threshold:  # a threshold set in the judge's settings (local_judge._version)
            try:
                return float(threshold)
            except ValueError:
                return DEFAULT_THRESHOLD
        for model in MODELS.values():
            if model.version == model_version:
                return model.claim_threshold
        return RETIRED_THRESHOLDS.get(model_version, DEFAULT_THRESHOLD)
    return DEFAULT_THRESHOLD


def confusion(labels: Sequence[bool], predictions: Sequence[bool]) -> dict[str, int]:
    """Counts of (label, verdict): tp = both good, fn = labelled good and judged not, fp, tn."""
    pairs = list(zip(labels, predictions, strict=True))
    return {
        "tp": sum(1 for y, p in pairs if y and p),
        "fn": sum(1 for y, p in pairs if y and not p),
        "fp": sum(1 for y, p in pairs if not y and p),
        "tn": sum(1 for y, p in pairs if not y and not p),
    }


def agreement_by_version(rows: Iterable[Mapping[str, Any]], threshold: float | None = None) -> list[dict[str, Any]]:
    """One entry per (metric, judge version), in that order: n labels, traces, reviewers, the threshold used,
    the agreement figures, the confusion matrix, how many labelled traces the judge could not score, and a
    warning when there are fewer than `MIN_LABELS` labels."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault((str(row["metric"]), str(row["judge_version"])), []).append(row)
    out = []
    for (metric, version), members in sorted(groups.items()):
        cut = default_threshold(metric, version) if threshold is None else threshold
        labels = [bool(r["label"]) for r in members]
        predictions = [r["score"] is not None and float(r["score"]) >= cut for r in members]
        n = len(members)
        out.append(
            {
                "metric": metric,
                "judge_version": version,
                "threshold": cut,
                **agreement(labels, predictions),
                "confusion": confusion(labels, predictions),
                "traces": len({r["trace_id"] for r in members}),
                "reviewers": len({r["reviewer"] for r in members}),
                "unscored": sum(1 for r in members if r["score"] is None),
                "warning": (
                    f"only {n} labels: below {MIN_LABELS} these figures are rough (label more before trusting them)"
                    if n < MIN_LABELS
                    else None
                ),
            }
        )
    return out


def format_agreement(report: Sequence[Mapping[str, Any]], since_label: str) -> str:
    """The text `ragmon calibrate --from-store` prints."""
    if not report:
        return (
            f"no labelled traces the judge scored in the {since_label}: label kept traces in the dashboard's "
            "review queue (a reviewer key is needed), then run this again"
        )

    def fmt(x: Any) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    lines = [f"agreement of the judge with people's labels, labels of the {since_label}"]
    for entry in report:
        c = entry["confusion"]
        lines += [
            "",
            f"{entry['metric']}  judge {entry['judge_version']}  threshold {entry['threshold']:.3f}",
            f"  n {entry['n']} labels ({entry['traces']} traces, {entry['reviewers']} reviewers)"
            f"  unscored {entry['unscored']}",
            f"  accuracy {fmt(entry['accuracy'])}  balanced accuracy {fmt(entry['balanced_accuracy'])}"
            f"  kappa {fmt(entry['kappa'])}  TPR {fmt(entry['tpr'])}  TNR {fmt(entry['tnr'])}",
            "                 judge: yes  judge: no",
            f"  label: yes     {c['tp']:>10}  {c['fn']:>9}",
            f"  label: no      {c['fp']:>10}  {c['tn']:>9}",
        ]
        if entry["warning"]:
            lines.append(f"  warning: {entry['warning']}")
    return "\n".join(lines)
