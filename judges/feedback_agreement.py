"""The judge's agreement with end users' feedback, per metric and judge version: the second truth
`ragmon calibrate --from-store` prints beside the reviewers' labels.

Feedback is a noisier label than a reviewer's, and it answers a broader question. A reviewer labels one metric
("is this answer faithful to its passages?"); a user's thumbs down says only "this answer was not good for me" —
wrong, but also unhelpful, too long, about the wrong product, slow, or a bad mood. So it is read this way: each trace
with thumbs or ratings is one observation, labelled good when fewer than half of its verdicts are negative (thumbs
down, a rating of 1-2) and not good otherwise; named scores are not verdicts and are left out. The judge's verdict
is its score at or above the threshold, as for labels (`label_agreement.agreement_by_version`).

What to expect: on faithfulness a good judge has a high TNR against reviewers' labels but a lower one here, since many
thumbs-down answers are faithful — those disagreements (the review queue's "thumbs down, judged faithful") are where
the app fails in a way no judge metric asks about, or the judge is wrong. A judge that passes what users reject is
worth a look; the figures never replace the reviewers' labels.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ragmon.judges.label_agreement import agreement_by_version, format_agreement


def feedback_agreement(rows: Iterable[Mapping[str, Any]], threshold: float | None = None) -> list[dict[str, Any]]:
    """One entry per (metric, judge version), as `agreement_by_version`'s, over `Store.feedback_scores` rows (one
    per trace); `reviewers` is 0 (end users are not counted as reviewers) and `voters` the verdicts behind them."""
    members = [{**row, "reviewer": ""} for row in rows]
    report = agreement_by_version(members, threshold)
    for entry in report:
        entry["reviewers"] = 0
        entry["verdicts"] = sum(
            int(r["verdicts"])
            for r in members
            if (r["metric"], r["judge_version"]) == (entry["metric"], entry["judge_version"])
        )
        if entry["warning"]:
            entry["warning"] = (
                entry["warning"]
                .replace("labels", "traces with feedback")
                .replace("label more", "collect more feedback")
            )
    return report


CAVEAT = (
    "end-user feedback is a noisier, broader label: a thumbs down means 'not good for me' (wrong, unhelpful, off"
    " topic ...), not 'unfaithful'; a trace reads as good when fewer than half of its thumbs and ratings are negative"
)


def format_feedback_agreement(report: Sequence[Mapping[str, Any]], since_label: str) -> str:
    if not report:
        return f"no traces with end-user feedback the judge scored in the {since_label}"
    text = format_agreement(report, since_label)
    text = text.replace(
        "agreement of the judge with people's labels, labels of the",
        "agreement of the judge with end users' feedback (thumbs, ratings), feedback of the",
    )
    text = text.replace("reviewers)", "verdicts)")
    for entry in report:
        text = text.replace(
            f"({entry['traces']} traces, 0 verdicts)", f"({entry['traces']} traces, {entry['verdicts']} verdicts)", 1
        )
    text = (
        text.replace(" labels (", " traces (")
        .replace("  label: yes", "  users: yes")
        .replace("  label: no ", "  users: no ")
    )
    return f"{text}\n  note: {CAVEAT}"
