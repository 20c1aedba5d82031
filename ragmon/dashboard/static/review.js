// ragmon review queue: people label kept traces so the judge can be calibrated on production (`ragmon calibrate
// --from-store`). #/review lists traces offered from every band of the judge's score; #/review/<trace id> shows
// one (question, passages, answer, the judge's per-claim verdicts) with a label per metric, per claim and a note.
// Text goes in through textContent only. Labels are written with the reviewer's key as the x-api-key header,
// never a cookie (no other site can make the browser send it); a reviewer key also reads, so the page holds one key.
"use strict";

(function () {
  const R = window.ragmon;
  const { $, el, clear } = R;
  // labels: metric -> [yes, no], for the metrics a person can judge from the page, in the agent's order (the judge
  // registry's review labels, from /api/dashboard/meta); metric: the one the queue shows, the first until chosen.
  const review = { metric: null, whoami: null, labels: null };

  async function reviewLabels() {
    if (!review.labels) {
      const meta = await R.meta();
      review.labels = new Map(meta.metrics.filter((m) => m.review_labels).map((m) => [m.name, m.review_labels]));
      review.metric = review.metric || review.labels.keys().next().value;
    }
    return review.labels;
  }

  async function postLabels(body) {
    const headers = { "Content-Type": "application/json", Accept: "application/json" };
    const key = R.apiKey();
    if (key) headers["x-api-key"] = key;
    const response = await fetch("/api/dashboard/labels", {
      method: "POST", headers, body: JSON.stringify(body), credentials: "omit", cache: "no-store",
    });
    let answer = null;
    try {
      answer = await response.json();
    } catch (err) {
      answer = { error: "HTTP " + response.status };
    }
    if (!response.ok) throw new Error((answer && answer.error) || "HTTP " + response.status);
    return answer;
  }

  function drawWho(whoami) {
    $("review-who").textContent = whoami.can_label
      ? "labelling as " + whoami.reviewer
      : whoami.labelling_configured ? "read only" : "labelling is off on this agent (no agent.reviewer_keys)";
    $("reviewer-form").hidden = whoami.can_label || !whoami.labelling_configured;
    const select = $("review-metric");
    if (!select.options.length) {
      for (const metric of review.labels.keys()) {
        const option = document.createElement("option");
        option.value = metric;
        option.textContent = R.metricLabel(metric);
        select.appendChild(option);
      }
      select.addEventListener("change", (e) => {
        review.metric = e.target.value;
        loadQueue();
      });
      $("review-disagreements").addEventListener("change", () => loadQueue());
    }
    select.value = review.metric;
  }

  function drawQueue(queue) {
    $("review-count").textContent = queue.reviewer ? "labelled by you: " + queue.labelled_by_you : "";
    const bins = $("review-bins");
    clear(bins);
    for (const b of queue.bins) {
      const text = "score " + b.low.toFixed(1) + "–" + b.high.toFixed(1) + ": " +
        (b.traces === null ? "none left to label" : b.traces + " traces, " + b.labelled + " labelled by you");
      bins.appendChild(el("li", { text }));
    }
    const body = $("review-queue").querySelector("tbody");
    clear(body);
    if (!queue.items.length) {
      const none = queue.filter ? "No disagreements: no kept trace with thumbs down that the judge passed in the last 7 days." : "Nothing to label: no judged kept traces left in the last 7 days.";
      body.appendChild(el("tr", {}, [el("td", { className: "empty-row", text: none })]));
      body.firstChild.firstChild.colSpan = 4;
      return;
    }
    for (const item of queue.items) {
      if (!R.TRACE_ID.test(item.trace_id)) continue;
      const href = "#/review/" + item.trace_id;
      const row = el("tr", { className: "trace-row review-row" }, [
        el("td", { className: "mono nowrap", text: R.fmtShortTime(item.start_ms), title: R.fmtTime(item.start_ms) + " UTC" }),
        el("td", { text: item.feature }),
        el("td", { className: "question" }, [el("a", { href, text: item.question || "(no question captured)" })]),
        el("td", { className: "num", text: R.fmtScore(item.score), title: "judge " + item.judge_version }),
      ]);
      row.dataset.traceId = item.trace_id;
      body.appendChild(row);
    }
  }

  async function loadQueue() {
    const mine = R.nextSeq();
    try {
      await reviewLabels();
      const whoami = await R.api("whoami", {});
      // "Thumbs down, judged faithful": the end users' and the judge's disagreements (review.py)
      const filter = $("review-disagreements").checked ? { filter: "thumbs_down_judged_good" } : {};
      const queue = await R.api("review", { metric: review.metric, ...filter });
      if (!R.isCurrent(mine)) return;
      review.whoami = whoami;
      R.showBanner("");
      R.showSection("review");
      drawWho(whoami);
      drawQueue(queue);
      document.body.dataset.loaded = "review";
    } catch (err) {
      if (R.isCurrent(mine)) R.handleError(err);
    }
  }

  // One metric's choice (yes / no / not labelled) and, where the judge listed claims, one choice per claim.
  function metricBlock(metric, score) {
    const [yes, no] = review.labels.get(metric);
    const name = "label-" + metric;
    const choice = (value, text) => {
      const input = el("input");
      input.type = "radio";
      input.name = name;
      input.value = value;
      return el("label", {}, [input, " " + text]);
    };
    const judged = score ? " (judge " + (score.value === null ? score.status : score.value.toFixed(2)) + ")" : "";
    const block = el("div", { className: "label-metric" }, [
      el("div", { className: "metric-name", text: R.metricLabel(metric) + judged }),
      el("div", { className: "choices" }, [choice("yes", yes), choice("no", no), choice("", "skip")]),
    ]);
    block.dataset.metric = metric;
    block.querySelector("input[value='']").checked = true;
    if (score && score.claims.length) {
      const claims = el("ul", { className: "label-claims" });
      score.claims.forEach((c, i) => {
        const select = el("select");
        for (const [value, text] of [["", "–"], ["yes", "supported"], ["no", "not supported"]]) {
          const option = el("option", { text });
          option.value = value;
          select.appendChild(option);
        }
        select.dataset.claim = c.claim;
        select.className = "claim-label";
        select.id = "claim-" + metric + "-" + i;
        claims.appendChild(el("li", {}, [
          el("span", { className: "verdict " + R.verdictTone(c.verdict), text: c.verdict }),
          el("span", { className: "claim-text", text: c.claim }),
          select,
        ]));
      });
      block.appendChild(claims);
    }
    return block;
  }

  function drawLabels(labels) {
    const list = $("review-labels");
    clear(list);
    if (!labels.length) list.appendChild(el("li", { className: "muted", text: "None yet." }));
    for (const l of labels) {
      list.appendChild(el("li", {}, [
        el("span", { className: "verdict " + (l.label ? "good" : "bad"), text: l.label ? review.labels.get(l.metric)?.[0] || "yes" : review.labels.get(l.metric)?.[1] || "no" }),
        el("span", { text: " " + R.metricLabel(l.metric) + " · " + l.reviewer + " · " + R.fmtTime(l.labelled_at_ms) }),
        l.note ? el("div", { className: "muted small", text: l.note }) : null,
      ]));
    }
  }

  function collect(traceId, scores) {
    const labels = [];
    const note = $("label-note").value;
    for (const block of $("label-metrics").querySelectorAll(".label-metric")) {
      const picked = block.querySelector("input[type=radio]:checked");
      if (!picked || !picked.value) continue;
      const metric = block.dataset.metric;
      const claims = Array.from(block.querySelectorAll("select.claim-label"))
        .filter((s) => s.value)
        .map((s) => ({ claim: s.dataset.claim, label: s.value === "yes" }));
      const shown = scores.filter((s) => s.metric === metric).map((s) => s.judge_version).filter(Boolean);
      labels.push({ metric, label: picked.value === "yes", note, claims, judge_versions: shown });
    }
    return { trace_id: traceId, labels };
  }

  async function loadReviewTrace(match) {
    const traceId = match[1];
    const mine = R.nextSeq();
    try {
      const [trace, labels] = await Promise.all([R.api("trace", { id: traceId }), R.api("labels", { id: traceId }), reviewLabels()]);
      if (!R.isCurrent(mine)) return;
      R.showBanner("");
      R.showSection("review-trace");
      $("review-question").textContent = trace.question || "(no question captured)";
      $("review-answer").textContent = trace.answer || "(no answer captured)";
      const passages = $("review-passages");
      clear(passages);
      for (const p of trace.passages || []) {
        passages.appendChild(el("li", { className: "passage" }, [
          el("div", { className: "passage-head" }, [el("span", { className: "mono passage-id", text: p.id }), el("span", { className: "num passage-score", text: R.fmtScore(p.score) })]),
          el("p", { className: "text passage-text", text: p.text }),
        ]));
      }
      const form = $("label-metrics");
      clear(form);
      for (const metric of review.labels.keys()) form.appendChild(metricBlock(metric, trace.scores.find((s) => s.metric === metric)));
      $("label-note").value = "";
      $("label-status").textContent = "";
      $("label-form").onsubmit = async (event) => {
        event.preventDefault();
        const body = collect(traceId, trace.scores);
        if (!body.labels.length) {
          $("label-status").textContent = "Choose at least one label.";
          return;
        }
        $("label-save").disabled = true;
        try {
          const written = await postLabels(body);
          $("label-status").textContent = "Saved " + written.written + " label" + (written.written === 1 ? "" : "s") + " as " + written.reviewer + ".";
          drawLabels(await R.api("labels", { id: traceId }));
          document.body.dataset.saved = traceId;
        } catch (err) {
          $("label-status").textContent = "Not saved: " + err.message;
        } finally {
          $("label-save").disabled = false;
        }
      };
      drawLabels(labels);
      window.scrollTo(0, 0);
      document.body.dataset.loaded = "review-trace";
    } catch (err) {
      if (R.isCurrent(mine)) R.handleError(err);
    }
  }

  $("reviewer-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("reviewer-key").value.trim();
    if (!key) return;
    R.setApiKey(key); // a reviewer key reads as well: it replaces the read key in this tab
    $("reviewer-key").value = "";
    loadQueue();
  });

  R.addRoute(/^#\/review\/([0-9a-f]{32})$/, loadReviewTrace);
  R.addRoute(/^#\/review$/, loadQueue);
})();
