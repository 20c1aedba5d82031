"""Webhook bodies: ragmon's JSON (the record as `AlertRecord.to_json()`), or a Slack-compatible message.

Slack incoming webhooks take `{"text": ..., "blocks": [...]}`: `text` is the notification fallback, the blocks are
what people see. Block Kit limits respected here: a header's plain text is at most 150 characters, a section's
text at most 3,000, and a section has at most 10 fields.
"""

from __future__ import annotations

import math
from typing import Any

from ragmon.drift.record import AlertRecord

PAYLOAD_VERSION = 1
_EMOJI = {"critical": ":red_circle:", "warning": ":large_orange_circle:", "info": ":large_blue_circle:"}


def json_payload(record: AlertRecord) -> dict[str, Any]:
    return {"type": "ragmon.alert", "version": PAYLOAD_VERSION, "alert": record.to_json()}


def _num(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.4g}"


def slack_payload(record: AlertRecord) -> dict[str, Any]:
    icon = ":white_check_mark:" if record.state == "resolved" else _EMOJI.get(record.severity, ":warning:")
    title = f"{record.state.upper()} {record.severity}: {record.rule}"
    scope = f"tenant {record.tenant} · feature {record.feature or '-'} · stage {record.stage or 'request'}"
    fields = [
        f"*Signal*\n{record.metric}",
        f"*Detector*\n{record.detector}",
        f"*Now*\n{_num(record.current_value)}",
        f"*Baseline*\n{_num(record.baseline_value)}",
        f"*Statistic*\n{_num(record.value)}",
        f"*Threshold*\n{_num(record.threshold)}",
    ]
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title[:150]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": f"{icon} {record.message}"[:3000]}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": text} for text in fields[:10]]},
    ]
    context = [scope, f"alert `{record.alert_id}`"]
    if record.trace_ids:
        context.append("traces: " + ", ".join(f"`{t}`" for t in record.trace_ids))
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(context)[:3000]}]})
    return {"text": f"{icon} {record.message}"[:3000], "blocks": blocks}
