"""`ragmon demo`: the demo RAG app's questions, under a fault mix, through an embedded agent (`pipeline`), then the
agent's report, what its sampler kept and the drift alerts; `--local-only` prints the spans without an agent (`run`).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ragmon.demo.faults import FAULT_STAGES, Faults, parse_stage_values
from ragmon.demo.generator import OpenAICompatibleGenerator
from ragmon.demo.pipeline import run_through_agent
from ragmon.demo.run import DEMO_FAULTS, run_demo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    stages = ", ".join(FAULT_STAGES)
    parser.add_argument("-n", "--requests", type=int, default=20, help="questions to answer (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="seed for question order and faults (default 0)")
    parser.add_argument("--endpoint", help="also export spans over OTLP/HTTP to this agent, e.g. http://127.0.0.1:4318")
    parser.add_argument(
        "--embedder",
        choices=("hashing", "minilm", "auto"),
        default="hashing",
        help="query/passage embedder (default: hashing, deterministic and offline)",
    )
    parser.add_argument("--summary-only", action="store_true", help="print only the per-stage summary")
    parser.add_argument(
        "--data-dir", type=Path, default=Path(".ragmon"), help="the embedded agent's store (default ./.ragmon)"
    )
    parser.add_argument(
        "--local-only", action="store_true", help="no agent: print the spans the SDK recorded, nothing stored"
    )
    parser.add_argument("--spans", action="store_true", help="with the agent: also print every span")
    faults = parser.add_argument_group("faults (default: a small mix of each; any option here replaces the mix)")
    faults.add_argument("--no-faults", action="store_true", help="inject nothing")
    faults.add_argument("--slow", action="append", metavar="STAGE=MS", help=f"extra latency; stages: {stages}")
    faults.add_argument("--slow-rate", type=float, help="fraction of a slow stage's calls that are slowed (default 1)")
    faults.add_argument("--error", action="append", metavar="STAGE=RATE", help="probability a stage raises")
    faults.add_argument("--unfaithful-rate", type=float, help="probability an answer gains a fabricated claim")
    faults.add_argument("--norm-bug", action="store_true", help="query vectors stop being unit length")
    faults.add_argument("--no-tools", action="store_true", help="never call the settings-lookup tool")
    llm = parser.add_argument_group("LLM (default: the offline extractive generator)")
    llm.add_argument("--llm-base-url", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:11434/v1")
    llm.add_argument("--llm-model", default="gpt-4o-mini", help="model name sent to the endpoint")
    llm.add_argument("--llm-api-key-env", default="OPENAI_API_KEY", help="environment variable holding the key")
    llm.add_argument("--llm-stream", action="store_true", help="stream the answer (records time to first token)")


def faults_from_args(args: argparse.Namespace) -> Faults:
    if args.no_faults:
        return Faults(tool_calls=not args.no_tools)
    chosen = (args.slow, args.slow_rate, args.error, args.unfaithful_rate, args.norm_bug or None)
    if all(value is None for value in chosen):
        return Faults(
            slow_ms=DEMO_FAULTS.slow_ms,
            slow_rate=DEMO_FAULTS.slow_rate,
            error_rate=DEMO_FAULTS.error_rate,
            unfaithful_rate=DEMO_FAULTS.unfaithful_rate,
            tool_calls=not args.no_tools,
        )
    return Faults(
        slow_ms=parse_stage_values(args.slow, "--slow"),
        slow_rate=1.0 if args.slow_rate is None else args.slow_rate,
        error_rate=parse_stage_values(args.error, "--error"),
        unfaithful_rate=args.unfaithful_rate or 0.0,
        norm_bug=args.norm_bug,
        tool_calls=not args.no_tools,
    )


def main(args: argparse.Namespace) -> int:
    try:
        faults = faults_from_args(args)
    except ValueError as exc:
        print(f"ragmon demo: {exc}", file=sys.stderr)
        return 2
    generator = None
    if args.llm_base_url:
        generator = OpenAICompatibleGenerator(
            args.llm_base_url, args.llm_model, os.environ.get(args.llm_api_key_env), stream=args.llm_stream
        )
    if args.local_only or args.endpoint:
        return run_demo(
            args.requests,
            faults=faults,
            endpoint=args.endpoint,
            seed=args.seed,
            embedder=args.embedder,
            generator=generator,
            show_spans=not args.summary_only,
        )

    def app(endpoint: str) -> int:
        return run_demo(
            args.requests,
            faults=faults,
            endpoint=endpoint,
            seed=args.seed,
            embedder=args.embedder,
            generator=generator,
            show_spans=args.spans,
        )

    return run_through_agent(args.data_dir, app)
