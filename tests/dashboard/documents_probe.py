"""Requests whose retrievals name their paragraphs, sent with ragmon's SDK: each searches the same two chunks of
one paragraph ("returns.md#p3", re-chunked into two) and another paragraph, so the documents view counts the
paragraph once per retrieval whichever chunk was found.

Run as `python -m tests.dashboard.documents_probe ENDPOINT API_KEY`.
"""

from __future__ import annotations

import sys

import ragmon

FEATURE = "documents-probe"
PARAGRAPH = "returns.md#p3"
OTHER = "shipping.md#p1"
REQUESTS = 6


def main(endpoint: str, api_key: str) -> int:
    ragmon.configure(service_name="documents-probe", endpoint=endpoint, api_key=api_key, capture_content=True)
    for i in range(REQUESTS):
        with ragmon.request(FEATURE, question="How long do I have to return an item?") as req:
            with ragmon.search(top_k=2, data_source="policies") as search:
                chunk = f"returns-c{i % 2}"  # two chunks of the one paragraph
                search.record(
                    documents=[
                        (chunk, 0.9, "Items can be returned within 30 days.", PARAGRAPH),
                        ("shipping-c0", 0.4, "Orders ship within two days.", OTHER),
                    ]
                )
            req.record(answer="Within 30 days.")
    ragmon.shutdown(10.0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
