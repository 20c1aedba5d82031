"""A real browser (Debian's chromium, driven by Playwright as tests/dashboard does) on a page of the app's own origin
posts feedback to the agent with only the write-only feedback key — the request a web app's thumbs button makes,
CORS preflight included. The listed origin's POST is stored; the same page served from another origin is refused by
CORS (the browser never sends the POST, nothing is stored)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragmon.agent.agent import Agent
from tests.agent.harness import free_port
from tests.feedback.conftest import FEEDBACK_KEY, PAGE_PORT, new_trace_id, receiver_url

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
]

# What a web app's thumbs button runs: the key is the write-only one, never the tenant's API key.
PAGE = """<!doctype html><html><body><script>
async function sendFeedback(endpoint, key, item) {
  try {
    const response = await fetch(endpoint + "/v1/feedback", {
      method: "POST",
      headers: {"Authorization": "Bearer " + key, "Content-Type": "application/json"},
      body: JSON.stringify(item),
    });
    return {status: response.status, body: await response.json()};
  } catch (error) {
    return {error: String(error)};
  }
}
</script></body></html>"""


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


def _serve(port: int) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def pages() -> Iterator[tuple[str, str]]:
    allowed, other = _serve(PAGE_PORT), _serve(free_port())
    yield f"http://127.0.0.1:{PAGE_PORT}/", f"http://127.0.0.1:{other.server_address[1]}/"
    for server in (allowed, other):
        server.shutdown()
        server.server_close()


def test_a_page_of_a_listed_origin_sends_feedback_with_the_write_key_and_another_origin_cannot(
    agent: Agent, pages: tuple[str, str], tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    allowed_page, other_page = pages
    endpoint = receiver_url(agent)
    sent, refused = new_trace_id(), new_trace_id()
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"]
        )
        try:
            page = context.new_page()
            page.goto(allowed_page)
            item = {"trace_id": sent, "thumbs": "down", "comment": "from the page", "id": "browser-1"}
            result = page.evaluate("([e, k, i]) => sendFeedback(e, k, i)", [endpoint, FEEDBACK_KEY, item])
            assert result == {"status": 200, "body": {"accepted": 1}}
            bad = page.evaluate("([e, k, i]) => sendFeedback(e, k, i)", [endpoint, FEEDBACK_KEY, {"trace_id": sent}])
            assert bad["status"] == 400 and bad["body"]["error"] == "no_value"  # the page can read why

            page.goto(other_page)
            item = {"trace_id": refused, "thumbs": "down", "id": "browser-2"}
            result = page.evaluate("([e, k, i]) => sendFeedback(e, k, i)", [endpoint, FEEDBACK_KEY, item])
            assert "error" in result and "Failed to fetch" in result["error"]
        finally:
            context.close()
    rows = agent.store.query(
        "SELECT trace_id, source, comment FROM feedback FINAL WHERE trace_id IN ({a:String}, {b:String})",
        {"a": sent, "b": refused},
    )
    assert rows == [{"trace_id": sent, "source": "feedback_key", "comment": "from the page"}]
