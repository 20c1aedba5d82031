"""Render a `GateResult` as the Markdown a pull request shows and the JSON a pipeline keeps."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ragmon.evaluation.gate import GateResult, RowChange

# Long lists go to the JSON report in full; the Markdown stays readable in a PR comment.
MARKDOWN_ROW_LIMIT = 50


def gate_json(result: GateResult, *, baseline: str, candidate: str) -> dict[str, Any]:
    config = result.config
    return {
        "verdict": "pass" if result.passed else "regression",
        "exit_code": 0 if result.passed else 1,
        "baseline": baseline,
        "candidate": candidate,
        "rows": {
            "paired": result.paired_rows,
            "only_baseline": list(result.only_baseline),
            "only_candidate": list(result.only_candidate),
        },
        "metrics": [asdict(m) for m in result.metrics],
        "regressed_metrics": [m.metric for m in result.regressed_metrics],
        "protected_regressions": [asdict(r) for r in result.protected_regressions],
        "newly_failing": [asdict(r) for r in result.newly_failing],
        "newly_passing": [asdict(r) for r in result.newly_passing],
        "bootstrap": {
            "resamples": config.resamples,
            "confidence": config.confidence,
            "seed": config.seed,
            "unit": "question_id",
        },
    }


def _number(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "–"
    return f"{value:+.4f}" if signed else f"{value:.4f}"


def _rows(title: str, changes: tuple[RowChange, ...]) -> list[str]:
    if not changes:
        return []
    lines = ["", f"### {title} ({len(changes)})", ""]
    lines += [f"- `{c.row_id}` (question `{c.question_id}`): {c.reason}" for c in changes[:MARKDOWN_ROW_LIMIT]]
    if len(changes) > MARKDOWN_ROW_LIMIT:
        lines.append(f"- … and {len(changes) - MARKDOWN_ROW_LIMIT} more (see the JSON report)")
    return lines


def gate_markdown(result: GateResult, *, baseline: str, candidate: str) -> str:
    config = result.config
    verdict = "✅ pass" if result.passed else "❌ regression"
    percent = round(config.confidence * 100)
    lines = [
        f"## ragmon gate: {verdict}",
        "",
        f"Baseline `{baseline}` → candidate `{candidate}`: {result.paired_rows} paired rows"
        f" ({len(result.only_baseline)} only in baseline, {len(result.only_candidate)} only in candidate).",
        "",
        f"| metric | baseline | candidate | Δ | {percent}% CI | tolerance | status |",
        "|---|---:|---:|---:|---|---:|---|",
    ]
    for m in result.metrics:
        ci = "–" if m.ci_low is None else f"[{_number(m.ci_low, True)}, {_number(m.ci_high, True)}]"
        if m.tolerance is None:
            tolerance = "–"
        else:  # the sign says which way a move counts against the metric
            tolerance = f"{'+' if m.lower_is_better else '-'}{m.tolerance:g}" if m.tolerance else "0"
        status = f"**{m.status}**" if m.status in ("regression", "missing in candidate") else m.status
        lines.append(
            f"| {m.metric} | {_number(m.baseline_mean)} | {_number(m.candidate_mean)} | {_number(m.delta, True)}"
            f" | {ci} | {tolerance} | {status} |"
        )
    lines += _rows("Protected rows that regressed", result.protected_regressions)
    lines += _rows("Newly failing rows", result.newly_failing)
    if result.newly_passing:
        lines += ["", f"{len(result.newly_passing)} rows newly pass."]
    lines += [
        "",
        f"Δ = candidate − baseline over rows both runs measured; intervals: paired bootstrap over questions,"
        f" {config.resamples} resamples, seed {config.seed}.",
    ]
    return "\n".join(lines) + "\n"
