"""Questions asked again and again, in other words, sent with ragmon's SDK: two recurring questions of one feature.
Every request fails on purpose, so each trace is kept and judged (the question view opens judged traces).

Run as `python -m tests.dashboard.question_probe ENDPOINT API_KEY`.
"""

from __future__ import annotations

import sys

import ragmon

FEATURE = "question-probe"
ASKED = {
    "How do I reset my password?": ["How do I reset my password?", "how do i reset my password", "Reset my password?"],
    "Can I get a refund for my order?": ["Can I get a refund for my order?", "can I get a refund for my order 4411"],
}


def main(endpoint: str, api_key: str) -> int:
    ragmon.configure(service_name="question-probe", endpoint=endpoint, api_key=api_key, capture_content=True)
    for askings in ASKED.values():
        for question in askings:
            try:
                with ragmon.request(FEATURE, question=question) as req:
                    with ragmon.search(top_k=1, data_source="help") as search:
                        search.record(documents=[("help.md#1", 0.9, "Use the reset link. Refunds within 30 days.")])
                    req.record(answer="Use the link on the sign-in page.")
                    raise RuntimeError("the probe fails on purpose, so its trace is kept")
            except RuntimeError:
                pass
    ragmon.shutdown(10.0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
