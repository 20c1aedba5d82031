"""The dashboard in headless Chromium against an agent whose store the demo filled: the charts draw the data, a
kept trace opens (waterfall, passages with scores, answer, per-claim verdicts), trace text with `<script>` shows as
text, and the browser reports no Content-Security-Policy violation from the page's own files. Saves screenshots.

Chromium is Debian's (`apt-get install -y chromium`), driven by Playwright at /usr/bin/chromium; Playwright's own
browser downloads are never used.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent.harness import REPO, AgentProcess
from tests.dashboard.known_rows import HOSTILE
from tests.dashboard.probe_app import FAILING_FEATURE, FAILING_MESSAGE
from tests.dashboard.probe_app import FEATURE as PROBE_FEATURE

CHROMIUM = Path("/usr/bin/chromium")
# Screenshots outlive the test's tmp_path (pytest prunes old basetemps): a fixed folder under the temp dir.
SCREENSHOT_DIR = Path(os.environ.get("RAGMON_SCREENSHOT_DIR", Path(tempfile.gettempdir()) / "ragmon-dashboard"))
KEY = "dashboard-test-key"
OTHER_TENANT_KEY = "another-tenants-key"
REVIEWER_KEY = "alice-reviews-the-default-tenant"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Collects CSP violations as the page meets them (init scripts are not subject to the page's policy).
CSP_RECORDER = (
    "window.__cspViolations = [];"
    "document.addEventListener('securitypolicyviolation', e => window.__cspViolations.push("
    "{directive: e.violatedDirective, source: e.sourceFile, blocked: e.blockedURI}));"
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium)"
    ),
]


def _run(*args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout_s, env=os.environ.copy()
    )


def _dashboard_json(agent: AgentProcess, name: str, **params: str) -> Any:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    request = urllib.request.Request(f"{agent.api}/api/dashboard/{name}?{query}", headers={"x-api-key": KEY})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _wait_until(condition: Any, what: str, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(1.0)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    data = tmp_path_factory.mktemp("dashboard") / "data"
    started = time.monotonic()
    demo = _run("-m", "ragmon.cli", "demo", "-n", "20", "--summary-only", "--data-dir", str(data))
    assert demo.returncode == 0, demo.stderr[-3000:]
    phases = [f"demo {time.monotonic() - started:.0f} s"]
    keys = json.dumps({"default": KEY, "someone-else": OTHER_TENANT_KEY})
    reviewers = json.dumps({"default": {"alice": REVIEWER_KEY}})
    env = {"RAGMON_AGENT__API_KEYS": keys, "RAGMON_AGENT__REVIEWER_KEYS": reviewers}
    process = AgentProcess(data, extra_env=env, grpc=False).start(timeout_s=300)
    phases.append(f"serve ready {time.monotonic() - started:.0f} s")
    try:
        probe = _run("-m", "tests.dashboard.probe_app", process.otlp_http, KEY, timeout_s=120)
        assert probe.returncode == 0, probe.stderr[-3000:]
        _wait_until(
            lambda: (
                {PROBE_FEATURE, FAILING_FEATURE}
                <= {t["feature"] for t in _dashboard_json(process, "traces", since_s="3600")}
            ),
            "the probe traces to be kept",
        )
        phases.append(f"probe kept {time.monotonic() - started:.0f} s")
        _wait_until(lambda: _dashboard_json(process, "quality", since_s="3600")["series"], "judge scores")
        phases.append(f"scores {time.monotonic() - started:.0f} s")
        print("\nbrowser test set-up: " + ", ".join(phases))
        yield process
    finally:
        process.stop()


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),  # a fresh profile per test
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1440, "height": 1000},
        )
        try:
            page = context.new_page()
            page.add_init_script(CSP_RECORDER)
            page.errors = []  # type: ignore[attr-defined]
            page.on("pageerror", lambda error: page.errors.append(str(error)))  # type: ignore[attr-defined]
            yield page
        finally:
            context.close()


def _plotted(page: Any, chart: str) -> list[dict[str, Any]]:
    """The traces plotly drew in a chart div: name and the non-null values on the data axis."""
    return page.evaluate(
        """id => (document.getElementById(id).data || []).map(t => ({
            name: t.name || '',
            values: (t.orientation === 'h' ? t.x : t.y).filter(v => v !== null && !Number.isNaN(v)),
        }))""",
        chart,
    )


def _log_in(page: Any, agent: AgentProcess, key: str) -> None:
    page.goto(f"{agent.api}/")
    page.wait_for_selector("#login-form", state="visible", timeout=30_000)  # keys are configured: asks for one
    page.fill("#login-key", key)
    page.click("#login-form button[type=submit]")


def test_dashboard_draws_the_demo_and_opens_a_kept_trace(agent: AgentProcess, page: Any) -> None:
    _log_in(page, agent, "a-wrong-key")
    page.wait_for_selector("#login-error:not([hidden])", timeout=30_000)
    assert "not accepted" in page.text_content("#login-error")

    page.fill("#login-key", KEY)
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("body[data-loaded=overview]", timeout=60_000)

    latency = _plotted(page, "chart-latency")
    stages = {t["name"] for t in latency if t["values"]}
    assert {"embed", "search", "generate", "request"} <= stages
    assert all(v > 0 for t in latency for v in t["values"])
    assert page.locator("#chart-latency g.trace.scatter path.point").count() > 0  # drawn, not only configured
    assert all(t["values"] for t in _plotted(page, "chart-stages"))
    assert sum(sum(t["values"]) for t in _plotted(page, "chart-cost")) > 0
    quality = _plotted(page, "chart-quality")
    assert quality and all(0 <= v <= 1 for t in quality for v in t["values"])
    assert int(page.text_content(".kpi:first-child .kpi-value").replace(",", "")) >= 30
    sampling = _dashboard_json(agent, "overview", since_s="3600")["sampling"]  # the demo's and the probe's decisions
    assert sampling["decided"] > 20 and 0 < sampling["kept"] == sum(sampling["kept_by_reason"].values())
    kept_note = page.locator(".kpi", has_text="Kept with text").locator(".kpi-note").text_content()
    assert kept_note.startswith(f"{sampling['kept']:,} of {sampling['decided']:,}: ")
    assert {part.split(" ")[0] for part in kept_note.split(": ", 1)[1].split(" · ")} == set(sampling["kept_by_reason"])

    # The probe's text is shown as text: no element injected, no script run.
    probe_row = page.locator("tr.trace-row", has_text="xss-probe").first
    assert "<script>window.__pwned = 1</script>" in probe_row.text_content()
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    overview_shot = SCREENSHOT_DIR / "dashboard-overview.png"
    page.screenshot(path=str(overview_shot), full_page=True)
    print(f"\nscreenshot: {overview_shot}")

    probe_row.click()
    page.wait_for_selector("body[data-loaded=trace]", timeout=30_000)
    passages = page.locator("#trace-passages li.passage")
    assert passages.count() == 2
    assert passages.first.locator(".passage-text").text_content() == "passage " + HOSTILE
    assert page.text_content("#trace-answer") == "answer " + HOSTILE
    assert page.text_content("#trace-question") == "question " + HOSTILE
    assert page.locator("main script, main img, main iframe").count() == 0
    assert page.evaluate("typeof window.__pwned") == "undefined"
    waterfall = _plotted(page, "chart-waterfall")
    assert len(waterfall[0]["values"]) == 4  # request, embed, search, generate
    # What went wrong is on the page: the failed span, the exception's type and its message.
    errors = page.locator("#trace-errors li").all_text_contents()
    assert errors == ["request xss-probeRuntimeErrorthe probe fails on purpose, so its trace is kept"]

    # A request that failed before answering: the answer box says so instead of standing empty.
    page.click("a.back")
    page.wait_for_selector("body[data-loaded=overview]", timeout=30_000)
    page.locator("tr.trace-row", has_text=FAILING_FEATURE).first.click()
    page.wait_for_selector("body[data-loaded=trace]", timeout=30_000)
    assert page.text_content("#trace-answer") == "No answer: the request failed (see the errors above)."
    assert "missing" in (page.get_attribute("#trace-answer", "class") or "")
    assert any(FAILING_MESSAGE in text for text in page.locator("#trace-errors li").all_text_contents())
    page.screenshot(path=str(SCREENSHOT_DIR / "dashboard-error-trace.png"), full_page=True)

    # A demo trace the judge scored: waterfall, passages with scores, answer, per-claim verdicts.
    page.click("a.back")
    page.wait_for_selector("body[data-loaded=overview]", timeout=30_000)
    page.locator("tr.trace-row", has=page.locator("td .score")).first.click()
    page.wait_for_selector("body[data-loaded=trace]", timeout=30_000)
    assert len(_plotted(page, "chart-waterfall")[0]["values"]) >= 4
    assert page.locator("#trace-passages .passage-score").count() > 0
    assert page.text_content("#trace-answer").strip()
    verdicts = page.locator("#trace-scores .claim .verdict").all_text_contents()
    assert verdicts and all(v.strip() for v in verdicts)
    # the judge is named as `ragmon report` and `scores.judge_version` name it
    trace_id = page.url.rsplit("/", 1)[-1]
    judge_version = _dashboard_json(agent, "trace", id=trace_id)["scores"][0]["judge_version"]
    assert page.text_content("#trace-judge") == "judge: " + judge_version
    trace_shot = SCREENSHOT_DIR / "dashboard-trace.png"
    page.screenshot(path=str(trace_shot), full_page=True)
    print(f"screenshot: {trace_shot}")

    assert page.errors == []  # type: ignore[attr-defined]
    # Nothing refused by the page's policy, not even plotly.js's map stylesheet (the page pre-empts it: assets.py).
    assert page.evaluate("window.__cspViolations") == []


def test_another_tenants_key_sees_none_of_the_demo(agent: AgentProcess, page: Any) -> None:
    _log_in(page, agent, OTHER_TENANT_KEY)
    page.wait_for_selector("body[data-loaded=overview]", timeout=60_000)
    assert page.locator("tr.trace-row").count() == 0
    assert page.text_content(".kpi:first-child .kpi-value").strip() == "0"
    assert page.locator("#chart-latency .empty").count() == 1


def test_the_traffic_selector_shows_an_eval_run_apart(agent: AgentProcess, page: Any, tmp_path: Path) -> None:
    """An eval run sent to the same agent: the page opens on production (the run's requests are not counted), the
    Traffic selector lists the run, and choosing it shows that run's requests alone."""
    from ragmon.evaluation.dataset import example_dataset_path

    dataset = tmp_path / "two.jsonl"
    dataset.write_text("\n".join(example_dataset_path().read_text().splitlines()[:2]) + "\n")
    command = ["-m", "ragmon.cli", "eval", "run", str(dataset), "--name", "browser-eval", "--endpoint", agent.otlp_http]
    command += ["--app", "ragmon.evaluation.demo_entry:answer", "--out", str(tmp_path / "run.jsonl")]
    run = subprocess.run(
        [sys.executable, *command],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RAGMON_EXPORT__API_KEY": KEY},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    _wait_until(
        lambda: _dashboard_json(agent, "overview", since_s="3600", eval_run="browser-eval")["totals"]["requests"] == 2,
        "the eval run in the rollups",
    )
    assert [r["eval_run"] for r in _dashboard_json(agent, "eval_runs", since_s="3600")] == ["browser-eval"]

    def production_now() -> int:
        return int(_dashboard_json(agent, "overview", since_s="3600")["totals"]["requests"])

    # The page and the API count whole minutes of the last hour, and the fixture's history fills that hour: at a
    # minute boundary a minute of it leaves the window. Read both early in one minute.
    if time.time() % 60 > 30:
        time.sleep(61 - time.time() % 60)
    production = production_now()
    _log_in(page, agent, KEY)
    page.wait_for_selector("body[data-loaded=overview]", timeout=60_000)

    def requests_shown() -> int:
        return int(page.text_content(".kpi:first-child .kpi-value").replace(",", ""))

    assert page.input_value("#traffic") == "production" and requests_shown() == production
    assert "Eval run browser-eval" in page.locator("#traffic option").all_text_contents()
    page.select_option("#traffic", "run:browser-eval")
    _wait_until(lambda: requests_shown() == 2, "the eval run's requests on the page", timeout_s=30)
    page.select_option("#traffic", "evaluation")
    _wait_until(lambda: requests_shown() == 2, "every eval run's requests on the page", timeout_s=30)
    page.select_option("#traffic", "production")
    _wait_until(lambda: requests_shown() == production_now(), "production again", timeout_s=30)
    assert page.errors == []  # type: ignore[attr-defined]


def test_a_reviewer_labels_three_traces_and_sees_them_counted(agent: AgentProcess, page: Any) -> None:
    """The review queue end to end: a read key may open it but not write; a reviewer key labels three traces (per
    metric, one claim and a note too), each leaves the queue and counts, and the overview's agreement figure is
    computed over them."""
    _log_in(page, agent, KEY)
    page.wait_for_selector("body[data-loaded=overview]", timeout=60_000)
    assert "No labels yet" in page.text_content("#agreement")
    page.click("#review-link")
    page.wait_for_selector("body[data-loaded=review]", timeout=30_000)
    assert page.text_content("#review-who") == "read only" and page.is_visible("#reviewer-form")
    bins = page.locator("#review-bins li").all_text_contents()
    assert len(bins) == 5 and bins[0].startswith("score 0.0–0.2: ")

    # the read key opens a trace but its label is refused, and says why
    page.locator("#review-queue tr.review-row a").first.click()
    page.wait_for_selector("body[data-loaded=review-trace]", timeout=30_000)
    page.check("input[name=label-faithfulness][value=no]")
    page.click("#label-save")
    page.locator("#label-status", has_text="Not saved").wait_for(timeout=30_000)  # (no wait_for_function: CSP)
    assert "may read but not write labels" in page.text_content("#label-status")

    page.click("#review-back")
    page.wait_for_selector("body[data-loaded=review]", timeout=30_000)
    page.fill("#reviewer-key", REVIEWER_KEY)
    page.click("#reviewer-form button[type=submit]")
    page.locator("#review-who", has_text="labelling as alice").wait_for(timeout=30_000)
    assert page.text_content("#review-count") == "labelled by you: 0" and not page.is_visible("#reviewer-form")

    labelled = []
    for i, faithful in enumerate([True, False, True]):
        row = page.locator("#review-queue tr.review-row").first
        trace_id = row.get_attribute("data-trace-id")
        assert trace_id and trace_id not in labelled
        row.locator("a").click()
        page.wait_for_selector("body[data-loaded=review-trace]", timeout=30_000)
        assert page.text_content("#review-question").strip() and page.text_content("#review-answer").strip()
        assert page.locator("#review-passages li.passage").count() > 0
        assert page.locator("#label-metrics .verdict").count() > 0  # the judge's per-claim verdicts
        page.check(f"input[name=label-faithfulness][value={'yes' if faithful else 'no'}]")
        page.check("input[name=label-answer_relevance][value=yes]")
        if i == 1:
            page.select_option("#claim-faithfulness-0", "no")
        page.fill("#label-note", f"note {i}")
        page.click("#label-save")
        page.wait_for_selector(f"body[data-saved='{trace_id}']", timeout=30_000)
        assert page.text_content("#label-status") == "Saved 2 labels as alice."
        assert len(page.locator("#review-labels li").all_text_contents()) == 2
        labelled.append(trace_id)
        page.click("#review-back")
        page.wait_for_selector("body[data-loaded=review]", timeout=30_000)
        assert page.text_content("#review-count") == f"labelled by you: {i + 1}"
        shown = {r.get_attribute("data-trace-id") for r in page.locator("#review-queue tr.review-row").all()}
        assert not shown & set(labelled)  # a labelled trace leaves the reviewer's queue

    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT_DIR / "dashboard-review.png"), full_page=True)
    page.click("a.brand")
    page.wait_for_selector("body[data-loaded=overview]", timeout=30_000)
    agreement = page.locator("#agreement .agreement").all_text_contents()
    assert any(text.startswith("faithfulness: κ ") and text.endswith(" over 3 labels") for text in agreement), agreement
    assert any(text.startswith("answer relevance: κ ") for text in agreement), agreement

    # in the store: six current labels by alice, six audit rows, the claim label and the notes as written
    rows = _dashboard_json(agent, "agreement")["versions"]
    assert sorted((v["metric"], v["n"]) for v in rows) == [("answer_relevance", 3), ("faithfulness", 3)]
    faithfulness = next(v for v in rows if v["metric"] == "faithfulness")
    assert sum(faithfulness["confusion"].values()) == 3
    assert faithfulness["confusion"]["tp"] + faithfulness["confusion"]["fn"] == 2  # two labelled faithful
    second = _dashboard_json(agent, "labels", id=labelled[1])
    assert {(x["metric"], x["label"], x["note"], x["reviewer"]) for x in second} == {
        ("faithfulness", False, "note 1", "alice"),
        ("answer_relevance", True, "note 1", "alice"),
    }
    assert [c["label"] for c in next(x for x in second if x["metric"] == "faithfulness")["claims"]] == [False]
    assert page.errors == []  # type: ignore[attr-defined]
    assert page.evaluate("window.__cspViolations") == []


def _read_json(agent: AgentProcess, name: str, **params: str) -> Any:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    request = urllib.request.Request(f"{agent.api}/api/read/{name}?{query}", headers={"x-api-key": KEY})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_a_trace_opens_its_conversation_and_the_conversations_are_listed(agent: AgentProcess, page: Any) -> None:
    from tests.dashboard import chat_probe

    sent = _run("-m", "tests.dashboard.chat_probe", agent.otlp_http, KEY, timeout_s=120)
    assert sent.returncode == 0, sent.stderr[-3000:]
    _wait_until(
        lambda: (
            [t["kept"] for t in _read_json(agent, "conversation", session=chat_probe.SESSION)["turns"]] == [True, True]
        ),
        "the probe's two turns to be kept",
    )
    turns = _read_json(agent, "conversation", session=chat_probe.SESSION)["turns"]
    follow_up = turns[1]["trace_id"]

    _log_in(page, agent, KEY)
    page.wait_for_selector("body[data-loaded=overview]", timeout=60_000)
    page.goto(f"{agent.api}/#/trace/{follow_up}")
    page.wait_for_selector("body[data-loaded=trace]", timeout=30_000)
    page.click("#trace-conversation")
    page.wait_for_selector("body[data-loaded=conversation]", timeout=30_000)
    assert page.text_content("#conversation-title") == f"Conversation {chat_probe.SESSION}"
    shown = page.locator("#conversation-turns li.turn")
    assert shown.count() == 2
    assert shown.all_inner_texts()[0].count(chat_probe.TURNS[0][0]) == 1
    assert [shown.nth(i).locator(".turn-question").text_content() for i in range(2)] == [q for q, _ in chat_probe.TURNS]
    assert [shown.nth(i).locator(".turn-answer").text_content() for i in range(2)] == [a for _, a in chat_probe.TURNS]
    assert page.locator("#conversation-turns li.turn.current").get_attribute("id") == f"turn-{follow_up}"
    assert page.locator("#conversation-turns li.turn.failed").count() == 2  # both failed on purpose
    assert page.text_content("#conversation-turn-count") == "2 turns"
    assert page.text_content("#conversation-gave-up") == "still open"  # its last turn is minutes old
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT_DIR / "dashboard-conversation.png"), full_page=True)

    page.click("#conversations-link")
    page.wait_for_selector("body[data-loaded=conversations]", timeout=30_000)
    row = page.locator("tr.conversation-row", has_text=chat_probe.SESSION)
    assert row.count() == 1 and row.locator("td").nth(3).text_content() == "2"
    row.locator("a").click()
    page.wait_for_selector("body[data-loaded=conversation]", timeout=30_000)
    assert page.locator("#conversation-turns li.turn").count() == 2
    assert page.evaluate("window.__cspViolations") == []
    assert page.errors == []  # type: ignore[attr-defined]


def test_the_releases_view_puts_releases_side_by_side_and_filters_to_one(agent: AgentProcess, page: Any) -> None:
    from tests.dashboard import release_probe

    sent = _run("-m", "tests.dashboard.release_probe", agent.otlp_http, KEY, timeout_s=120)
    assert sent.returncode == 0, sent.stderr[-3000:]

    def probe_releases() -> dict[str, int]:
        rows = _read_json(agent, "releases", since_s="3600", feature=release_probe.FEATURE)
        return {row["release"]: row["requests"] for row in rows}

    _wait_until(lambda: probe_releases() == release_probe.RELEASES, "both releases in the rollups")
    _log_in(page, agent, KEY)
    page.wait_for_selector("body[data-loaded=overview]", timeout=60_000)
    page.click("#releases-link")
    page.wait_for_selector("body[data-loaded=releases]", timeout=30_000)
    rows = page.locator("#release-table tr.release-row", has_text=release_probe.FEATURE)
    shown = {
        rows.nth(i).locator("td").nth(1).text_content(): rows.nth(i).locator("td").nth(5).text_content()
        for i in range(rows.count())
    }
    assert shown == {release: str(n) for release, n in release_probe.RELEASES.items()}
    assert page.is_hidden("#release-stages")
    assert "7.1.1" in page.locator("#release-filter option").all_text_contents()

    page.evaluate("document.body.dataset.loaded = ''")
    page.select_option("#release-filter", "7.1.1")
    page.wait_for_selector("body[data-loaded=releases]", timeout=30_000)
    assert {r.get_attribute("data-release") for r in page.locator("#release-table tr.release-row").all()} == {"7.1.1"}
    assert page.is_visible("#release-stages")
    stages = page.locator("#release-stages tr.release-stage", has_text=release_probe.FEATURE)
    calls = {
        stages.nth(i).locator("td").nth(1).text_content(): stages.nth(i).locator("td").nth(2).text_content()
        for i in range(stages.count())
    }
    assert calls == {"request": "2", "search": "2"}
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT_DIR / "dashboard-releases.png"), full_page=True)


def test_a_canary_alert_opens_the_release_comparison(agent: AgentProcess, page: Any) -> None:
    from tests.dashboard import canary_probe

    for release, fail_every in (("1.0", 0), ("1.1", 3)):
        sent = _run("-m", "tests.dashboard.canary_probe", agent.otlp_http, KEY, release, "240", str(fail_every))
        assert sent.returncode == 0, sent.stderr[-3000:]

    def canary_alert() -> dict[str, Any] | None:
        alerts = _dashboard_json(agent, "alerts")
        return next((a for a in alerts if a["rule"] == "canary" and a["feature"] == canary_probe.FEATURE), None)

    _wait_until(lambda: canary_alert() is not None, "the canary alert of release 1.1", timeout_s=300)
    alert = canary_alert()
    assert alert is not None and "release 1.1" in alert["message"] and "error rate" in alert["message"]

    _log_in(page, agent, KEY)
    page.wait_for_selector("body[data-loaded=overview]", timeout=60_000)
    link = page.locator("#alerts li", has_text="release 1.1").locator("a.alert-link")
    assert link.get_attribute("href") == f"#/compare?feature={canary_probe.FEATURE}&baseline=1.0&candidate=1.1"
    link.click()
    page.wait_for_selector("body[data-loaded=compare]", timeout=60_000)
    assert page.text_content("#compare-title") == f"{canary_probe.FEATURE}: release 1.1 against 1.0"
    errors = page.locator("#compare-overall tr.metric-error_rate")
    assert errors.count() == 1 and "regressed" in (errors.get_attribute("class") or "")
    assert errors.locator("td").nth(5).text_content() == "240 / 240"
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT_DIR / "dashboard-compare.png"), full_page=True)


def test_the_documents_view_shows_paragraphs_problem_documents_and_the_release_form(
    agent: AgentProcess, page: Any
) -> None:
    from tests.dashboard import documents_probe as probe

    sent = _run("-m", "tests.dashboard.documents_probe", agent.otlp_http, KEY, timeout_s=120)
    assert sent.returncode == 0, sent.stderr[-3000:]

    def probe_documents() -> list[dict[str, Any]]:
        rows = _read_json(agent, "documents", since_s="3600", feature=probe.FEATURE)
        return rows if isinstance(rows, list) else []

    # the agent rolls a range's documents up once the sampler has decided its traces
    _wait_until(lambda: sum(d["retrieved"] for d in probe_documents()) == 2 * probe.REQUESTS, "the probe's documents")

    _log_in(page, agent, KEY)
    page.wait_for_selector("body[data-loaded=overview]", timeout=60_000)
    page.select_option("#feature", probe.FEATURE)  # the demo's documents beside it could outnumber the list
    page.wait_for_selector("body[data-loaded=overview]", timeout=60_000)
    page.click("#documents-link")
    page.wait_for_selector("body[data-loaded=documents]", timeout=30_000)
    row = page.locator("#documents-top tr.document-row", has_text=probe.PARAGRAPH)
    assert row.count() == 1
    cells = row.locator("td").all_text_contents()
    # feature, document, retrieved, traces, mean rank, first, chunks: the paragraph, re-chunked, is one document
    assert cells[:7] == [probe.FEATURE, probe.PARAGRAPH, str(probe.REQUESTS), str(probe.REQUESTS), "1.0",
                         str(probe.REQUESTS), "2"]  # fmt: skip
    other = page.locator("#documents-top tr.document-row", has_text=probe.OTHER)
    assert other.locator("td").nth(4).text_content() == "2.0"  # always second
    assert page.locator("#documents-problems tbody tr").count() >= 1  # problem rows, or the line saying there are none

    page.fill("#documents-release-a", "v1")
    page.fill("#documents-release-b", "v2")
    page.click("#documents-shift-go")
    page.wait_for_selector("body[data-shift='v1..v2']", timeout=30_000)
    assert page.locator("#documents-shift-groups li").count() >= 1  # the groups, or the line saying there are none
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT_DIR / "dashboard-documents.png"), full_page=True)
    assert page.evaluate("window.__cspViolations") == []
    assert page.errors == []  # type: ignore[attr-defined]


def _post_feedback(agent: AgentProcess, items: list[dict[str, Any]]) -> None:
    """Feedback as the app's backend sends it: JSON to the receiver's /v1/feedback with the tenant's API key."""
    request = urllib.request.Request(
        f"{agent.otlp_http}/v1/feedback",
        data=json.dumps(items).encode(),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200 and json.loads(response.read()) == {"accepted": len(items)}


def test_feedback_figures_and_the_thumbs_down_judged_faithful_filter(agent: AgentProcess, page: Any) -> None:
    """Users' thumbs on kept traces the judge passed: the feedback view counts them per feature and release, and the
    review queue's "Thumbs down, judged faithful" checkbox shows exactly the traces given thumbs down."""
    queue = _dashboard_json(agent, "review", metric="faithfulness", per_bin="50")["items"]
    passed = [item for item in queue if item["score"] >= 0.5]
    assert len(passed) >= 3, queue
    down = {passed[0]["trace_id"], passed[1]["trace_id"]}
    up = passed[2]["trace_id"]
    _post_feedback(
        agent,
        [*({"trace_id": t, "thumbs": "down", "user": "browser-test"} for t in down), {"trace_id": up, "thumbs": "up"}],
    )
    _log_in(page, agent, KEY)
    page.click("#review-link")
    page.wait_for_selector("body[data-loaded=review]", timeout=30_000)
    page.evaluate("document.body.dataset.loaded = ''")
    page.check("#review-disagreements")
    page.wait_for_selector("body[data-loaded=review]", timeout=30_000)
    shown = {r.get_attribute("data-trace-id") for r in page.locator("#review-queue tr.review-row").all()}
    assert shown == down
    page.evaluate("document.body.dataset.loaded = ''")
    page.uncheck("#review-disagreements")
    page.wait_for_selector("body[data-loaded=review]", timeout=30_000)
    assert page.locator("#review-queue tr.review-row").count() > len(down)  # the whole queue again

    page.click("#feedback-link")
    page.wait_for_selector("body[data-loaded=feedback]", timeout=30_000)
    rows = page.locator("#feedback-releases tbody tr.feedback-row")
    cells = [row.locator("td").all_text_contents() for row in rows.all()]
    expected = _read_json(agent, "feedback", since_s="3600")
    assert sum(int(c[3]) for c in cells) == sum(r["thumbs_up"] for r in expected if r["feature"]) >= 1
    assert sum(int(c[4]) for c in cells) == sum(r["thumbs_down"] for r in expected if r["feature"]) >= 2
    assert {c[0] for c in cells} == {r["feature"] for r in expected if r["feature"]}
    # Per question group: the rows the read gives (none when the grouper has not placed these traces yet).
    grouped = _read_json(agent, "feedback_questions", since_s="3600")
    assert page.locator("#feedback-questions tbody tr.feedback-row").count() == len(grouped)
    assert page.errors == []  # type: ignore[attr-defined]
    page.screenshot(path=str(SCREENSHOT_DIR / "dashboard-feedback.png"), full_page=True)


def test_the_question_view_shows_the_most_common_questions_and_opens_their_traces(
    agent: AgentProcess, page: Any
) -> None:
    from tests.dashboard import question_probe

    sent = _run("-m", "tests.dashboard.question_probe", agent.otlp_http, KEY, timeout_s=120)
    assert sent.returncode == 0, sent.stderr[-3000:]
    asked = {label: len(askings) for label, askings in question_probe.ASKED.items()}

    def grouped() -> dict[str, int]:
        rows = _read_json(agent, "question_groups", since_s="3600", feature=question_probe.FEATURE)
        return {row["label"]: row["requests"] for row in rows if row["trace_ids"]}  # judged too

    _wait_until(lambda: grouped() == asked, "both questions grouped, with judged traces")
    _log_in(page, agent, KEY)
    page.wait_for_selector("body[data-loaded=overview]", timeout=60_000)
    page.evaluate("document.body.dataset.loaded = ''")
    page.select_option("#feature", question_probe.FEATURE)  # the demo's questions outnumber the probe's
    page.wait_for_selector("body[data-loaded=overview]", timeout=60_000)
    page.click("#questions-link")
    page.wait_for_selector("body[data-loaded=questions]", timeout=30_000)
    rows = page.locator("#question-table tr.question-row")
    shown = {
        rows.nth(i).locator(".question-text").text_content(): rows.nth(i).locator("td").nth(4).text_content()
        for i in range(rows.count())
    }
    assert shown == {label: str(n) for label, n in asked.items()}
    password = rows.filter(has_text="How do I reset my password?")
    assert password.locator("td").nth(5).text_content() == "100 %"  # every probe request failed, none before
    assert "also: " in password.locator(".question-examples").text_content()  # asked in other words too
    link = password.locator("a.question-trace").first
    trace_id = link.get_attribute("href").removeprefix("#/trace/")
    link.click()
    page.wait_for_selector("body[data-loaded=trace]", timeout=30_000)
    assert page.url.endswith("#/trace/" + trace_id)
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    page.goto(page.url.split("#")[0] + "#/questions")
    page.wait_for_selector("body[data-loaded=questions]", timeout=30_000)
    page.screenshot(path=str(SCREENSHOT_DIR / "dashboard-questions.png"), full_page=True)
    assert page.evaluate("window.__cspViolations") == []
    assert page.errors == []  # type: ignore[attr-defined]
