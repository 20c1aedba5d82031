"""Requests of two releases of one app, sent with ragmon's SDK: `ragmon.configure(release=...)` once per release.

Run as `python -m tests.dashboard.release_probe ENDPOINT API_KEY`. The first configure creates the provider, so its
release is on the resource; the second joins that provider, so its release rides on the request spans.
"""

from __future__ import annotations

import sys

import ragmon

FEATURE = "release-probe"
RELEASES = {"7.1.0": 3, "7.1.1": 2}  # release -> requests


def main(endpoint: str, api_key: str) -> int:
    for release, requests in RELEASES.items():
        ragmon.configure(service_name="release-probe", endpoint=endpoint, api_key=api_key, release=release)
        for _ in range(requests):
            with ragmon.request(FEATURE), ragmon.search(top_k=1) as search:
                search.record(documents=[("doc.md#1", 0.9, None)])
        ragmon.force_flush(10.0)
    ragmon.shutdown(10.0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
