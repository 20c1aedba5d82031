"""One request whose question, passage and answer carry HTML and script, sent with ragmon's SDK to an agent.

Run as `python -m tests.dashboard.probe_app ENDPOINT API_KEY`. The request fails on purpose so the tail sampler
keeps it (errors are kept at 100 %) and its text reaches `payloads`, where the dashboard reads it. A second request
fails in its model call, before it has an answer.
"""

from __future__ import annotations

import sys

import ragmon
from tests.dashboard.known_rows import HOSTILE

FEATURE = "xss-probe"
FAILING_FEATURE = "failing-probe"
FAILING_MESSAGE = "the model did not answer within 30 s"


def main(endpoint: str, api_key: str) -> int:
    ragmon.configure(service_name="dashboard-probe", endpoint=endpoint, api_key=api_key, capture_content=True)
    try:
        with ragmon.request(FEATURE, question="question " + HOSTILE) as req:
            with ragmon.embed("text-embedding-3-small", provider="openai") as embed:
                embed.record(input_tokens=7)
            with ragmon.search(top_k=2, data_source="docs") as search:
                search.record(documents=[("evil.md#1", 0.93, "passage " + HOSTILE), ("plain.md#2", 0.41, "plain")])
            with ragmon.generate("gpt-4o-mini", provider="openai") as generate:
                generate.record(input_tokens=50, output_tokens=9, answer="answer " + HOSTILE)
            req.record(answer="answer " + HOSTILE)
            raise RuntimeError("the probe fails on purpose, so its trace is kept")
    except RuntimeError:
        pass
    # A request that fails before it has an answer: the trace page must say so, not draw an empty answer.
    try:
        with (
            ragmon.request(FAILING_FEATURE, question="a question the model never answers"),
            ragmon.generate("gpt-4o-mini", provider="openai"),
        ):
            raise TimeoutError(FAILING_MESSAGE)
    except TimeoutError:
        pass
    ragmon.shutdown(10.0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
