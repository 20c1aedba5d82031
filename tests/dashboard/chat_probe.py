"""A conversation of two turns sent with ragmon's SDK: a question, then a follow-up, in one session. Both fail after
answering, so the tail sampler keeps them (errors are kept at 100 %) and their text reaches `payloads`.

Run as `python -m tests.dashboard.chat_probe ENDPOINT API_KEY`.
"""

from __future__ import annotations

import sys

import ragmon

SESSION = "chat-probe-session"
TURNS = (
    ("How much does the monthly plan cost?", "The monthly plan costs 10 dollars."),
    ("and for the annual plan?", "The annual plan costs 99 dollars."),
)


def main(endpoint: str, api_key: str) -> int:
    ragmon.configure(service_name="chat-probe", endpoint=endpoint, api_key=api_key, capture_content=True)
    for question, answer in TURNS:
        try:
            with ragmon.request("chat-probe", session=SESSION, question=question) as req:
                with ragmon.search(top_k=1, data_source="plans") as search:
                    search.record(documents=[("plans.md#1", 0.9, "Monthly: 10 dollars. Annual: 99 dollars.")])
                req.record(answer=answer)
                raise RuntimeError("the probe fails on purpose, so its trace is kept")
        except RuntimeError:
            pass
    ragmon.shutdown(10.0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
