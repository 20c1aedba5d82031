"""Dump exactly what a third-party instrumentation sends: run an app of tests/thirdparty/apps against the scripted
OpenAI server, with an in-memory exporter in the app process, and write every span (name, ids, kind, status,
all attributes, events with their attributes) as JSON.

    .venv/bin/python -m tests.thirdparty.dump_spans                      # all six app × instrumentation pairs
    .venv/bin/python -m tests.thirdparty.dump_spans langchain:openllmetry --out /tmp/dumps
    .venv/bin/python -m tests.thirdparty.dump_spans langchain:openinference+openai  # + the openai instrumentor
    .venv/bin/python -m tests.thirdparty.dump_spans llamaindex:openllmetry-openai   # without it

Files: ``<out>/<app>_<instrumentation>.json`` (default out: /tmp/thirdparty_dumps), plus the app's results
(``.results.json``: question, answer or error, trace ids) and what the scripted server received
(``.requests.json``). Also useful for a new instrumentation: add its app and name to `COMBINATIONS`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from ragmon.testing import ScriptedOpenAIServer
from tests.thirdparty.apps import common

REPO = Path(__file__).resolve().parents[2]

COMBINATIONS: tuple[tuple[str, str], ...] = (
    ("langchain", "openinference"),
    ("langchain", "openllmetry"),
    ("llamaindex", "openinference"),
    ("llamaindex", "openllmetry"),
    ("openai", "genai"),
    ("openai", "openinference"),
)


def run_app(
    app: str,
    instrumentation: str,
    base_url: str,
    *,
    otlp: str | None = None,
    dump: Path | None = None,
    results: Path | None = None,
    questions: str = "",
    extra_env: dict[str, str] | None = None,
    timeout_s: float = 300.0,
) -> subprocess.CompletedProcess[str]:
    """Run one app as a subprocess from the repository root (the tests use this too)."""
    command = [sys.executable, "-m", f"tests.thirdparty.apps.{app}_app", instrumentation, "--base-url", base_url]
    if otlp:
        command += ["--otlp", otlp]
    if dump:
        command += ["--dump", str(dump)]
    if results:
        command += ["--results", str(results)]
    if questions:
        command += ["--questions", questions]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(extra_env or {})}
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)


def dump(app: str, instrumentation: str, out: Path) -> Path:
    """One app under one instrumentation; ``<name>+openai`` / ``<name>-openai`` turn the openai client's
    instrumentor on / off in a framework app (default: as the vendor's set-up does,
    `common.uses_openai_instrumentor`)."""
    target = out / f"{app}_{instrumentation}.json"
    name, plus, _ = instrumentation.partition("+")
    name, minus, _ = name.partition("-")
    env = {"RAGMON_TP_OPENAI_INSTRUMENTOR": "on" if plus else "off"} if plus or minus else {}
    with ScriptedOpenAIServer(default=common.scripted_reply) as server:
        result = run_app(
            app,
            name,
            server.base_url,
            dump=target,
            results=out / f"{app}_{instrumentation}.results.json",
            extra_env=env,
        )
        requests = [{"path": r.path, "json": r.json} for r in server.requests]
        errors = [repr(e) for e in server.handler_errors]
    (out / f"{app}_{instrumentation}.requests.json").write_text(json.dumps(requests, indent=1) + "\n")
    if result.returncode != 0:
        raise SystemExit(f"{app} {instrumentation} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    if errors:
        raise SystemExit(f"{app} {instrumentation}: the scripted server could not answer: {errors}")
    if result.stderr.strip():
        print(f"--- {app} {instrumentation} stderr:\n{result.stderr.strip()}", file=sys.stderr)
    spans = json.loads(target.read_text())["spans"]
    names = Counter(s["name"] for s in spans)
    print(f"{target}: {len(spans)} spans, {len(requests)} API requests; {dict(names)}")
    return target


def show(path: Path, width: int = 100) -> str:
    """A dump as span trees, one per trace: name, kind, status, and each attribute cut to `width` characters."""
    spans = json.loads(path.read_text())["spans"]
    children: dict[tuple[str, str | None], list[dict[str, object]]] = {}
    traces: list[str] = []
    for span in sorted(spans, key=lambda s: s["start_time_ns"]):
        if span["trace_id"] not in traces:
            traces.append(span["trace_id"])
        children.setdefault((span["trace_id"], span["parent_span_id"]), []).append(span)
    lines: list[str] = []

    def walk(trace_id: str, parent: str | None, depth: int) -> None:
        for span in children.get((trace_id, parent), []):
            status = span["status"]["code"]  # type: ignore[index]
            lines.append(f"{'  ' * depth}{span['name']}  [{span['kind']} {status}]")
            for key, value in span["attributes"].items():  # type: ignore[attr-defined]
                text = json.dumps(value, ensure_ascii=False)
                lines.append(f"{'  ' * depth}  | {key} = {text[:width]}{'…' if len(text) > width else ''}")
            for event in span["events"]:  # type: ignore[attr-defined]
                lines.append(f"{'  ' * depth}  ! event {event['name']}: {json.dumps(event['attributes'])[:width]}")
            walk(trace_id, span["span_id"], depth + 1)  # type: ignore[arg-type]

    for trace_id in traces:
        lines.append(f"=== trace {trace_id}")
        walk(trace_id, None, 0)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pairs", nargs="*", help="app:instrumentation (default: all)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/thirdparty_dumps"))
    parser.add_argument("--show", type=Path, help="print a dump file as span trees instead")
    args = parser.parse_args(argv)
    if args.show:
        print(show(args.show))
        return 0
    pairs = [tuple(p.split(":", 1)) for p in args.pairs] or list(COMBINATIONS)
    args.out.mkdir(parents=True, exist_ok=True)
    for app, instrumentation in pairs:
        dump(app, instrumentation, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
