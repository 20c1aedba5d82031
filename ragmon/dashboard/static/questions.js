// ragmon question view: #/questions shows the questions users keep asking (recurring question groups), most asked
// first — per group its share of the window's grouped requests, requests, how it was asked, error rate, refusal
// rate, judged quality weighted back to all traffic, and how each moved against the window before. A group opens
// its judged traces (the trace view). Read through the agent's named read `question_groups` (GET /api/read/…).
// Text goes in through textContent only.
"use strict";

(function () {
  const R = window.ragmon;
  const { $, el, clear } = R;

  // "+3 pts", "-0.12": a change, or nothing when either side had no value
  function moved(change, asPoints) {
    if (change === null || change === undefined) return "";
    const text = asPoints ? Math.round(change * 100) + " pts" : change.toFixed(2);
    return " (" + (change > 0 ? "+" : "") + text + ")";
  }

  function rate(now, change) {
    return now === null || now === undefined ? "–" : R.fmtPct(now) + moved(change, true);
  }

  function quality(group) {
    const cell = el("td", { className: "question-quality" });
    for (const [metric, q] of Object.entries(group.quality)) {
      if (q.mean === null) continue;
      cell.appendChild(el("div", {
        text: R.metricLabel(metric) + " " + q.mean.toFixed(2) + moved(group.change.quality[metric], false) + " n=" + q.judged,
      }));
    }
    if (!cell.childNodes.length) cell.textContent = "–";
    return cell;
  }

  function traces(group) {
    const cell = el("td", { className: "question-traces" });
    for (const id of group.trace_ids || []) {
      cell.appendChild(el("a", { className: "mono question-trace", href: "#/trace/" + id, text: id.slice(0, 8) }));
      cell.appendChild(document.createTextNode(" "));
    }
    if (!cell.childNodes.length) cell.textContent = "none judged";
    return cell;
  }

  function draw(groups) {
    const body = $("question-table").querySelector("tbody");
    clear(body);
    groups.forEach((g, i) => {
      const asked = el("td", { className: "question-label" }, [el("div", { className: "question-text", text: g.label })]);
      const others = g.examples.filter((e) => e !== g.label);
      if (others.length) asked.appendChild(el("div", { className: "sub question-examples", text: "also: " + others.join(" · ") }));
      const row = el("tr", { className: "question-row" }, [
        el("td", { className: "num", text: String(i + 1) }),
        asked,
        el("td", { text: g.feature }),
        el("td", { className: "num", text: R.fmtPct(g.share) + moved(g.change.share, true) }),
        el("td", { className: "num", text: String(g.requests) }),
        el("td", { className: "num", text: rate(g.error_rate, g.change.error_rate) }),
        el("td", { className: "num", text: rate(g.refusal_rate, g.change.refusal_rate) }),
        quality(g),
        traces(g),
      ]);
      row.dataset.group = g.group_id;
      body.appendChild(row);
    });
    if (!groups.length) body.appendChild(el("tr", {}, [el("td", { className: "empty-row", text: "No questions grouped in this window." })]));
  }

  async function loadQuestions() {
    R.stopRefresh();
    const mine = R.nextSeq();
    try {
      const params = { since_s: String(Number($("window").value) || 3600), limit: "20" };
      const feature = $("feature").value;
      if (feature) params.feature = feature;
      await R.meta();
      const groups = await R.read("question_groups", params);
      if (!R.isCurrent(mine)) return;
      R.showBanner("");
      R.showSection("questions");
      draw(groups);
      document.body.dataset.loaded = "questions";
    } catch (err) {
      if (R.isCurrent(mine)) R.handleError(err);
    }
  }

  R.addRoute(/^#\/questions$/, loadQuestions);
})();
