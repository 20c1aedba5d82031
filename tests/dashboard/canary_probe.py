"""Requests of one release (`service.version`) sent with ragmon's SDK: the browser test sends release 1.0, then 1.1
whose every third request fails, so the agent's canary analysis raises an alert that links to the comparison.

Run as `python -m tests.dashboard.canary_probe ENDPOINT API_KEY RELEASE REQUESTS FAIL_EVERY` (0: none fails).
"""

from __future__ import annotations

import sys

import ragmon

FEATURE = "canary-probe"


def main(endpoint: str, api_key: str, release: str, requests: int, fail_every: int) -> int:
    ragmon.configure(service_name="canary-probe", endpoint=endpoint, api_key=api_key, release=release)
    for i in range(requests):
        try:
            with ragmon.request(FEATURE, question=f"question {i % 5}"):
                with ragmon.search(top_k=1, data_source="docs") as search:
                    search.record(documents=[(f"doc-{i % 5}", 0.8, "")])
                with ragmon.generate("gpt-4o-mini", provider="openai") as generate:
                    generate.record(input_tokens=40, output_tokens=8)
                if fail_every and i % fail_every == 0:
                    raise RuntimeError("release 1.1 fails on purpose")
        except RuntimeError:
            pass
    ragmon.shutdown(30.0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])))
