// ragmon feedback view: #/feedback shows what the app's own users said about its answers over the window chosen —
// per feature and release (the `feedback` named read) and per recurring question group where the grouper has placed
// the traces (`feedback_questions`), the groups with the most negative verdicts first. Text goes in through
// textContent only.
"use strict";

(function () {
  const R = window.ragmon;
  const { $, el, clear } = R;

  function pct(v) {
    return v === null || v === undefined ? "–" : Math.round(100 * v) + " %";
  }

  function tone(share) {
    return share === null || share === undefined ? "" : share >= 0.5 ? "bad" : share >= 0.2 ? "warn" : "good";
  }

  function figures(r) {
    return [
      el("td", { className: "num", text: String(r.feedback) }),
      el("td", { className: "num", text: String(r.thumbs_up) }),
      el("td", { className: "num", text: String(r.thumbs_down) }),
      el("td", { className: "num", text: r.ratings ? r.mean_rating.toFixed(1) + " (" + r.ratings + ")" : "–" }),
      el("td", { className: "num negative-share " + tone(r.negative_share), text: pct(r.negative_share) }),
    ];
  }

  function fill(table, rows, cells, empty) {
    const body = table.querySelector("tbody");
    clear(body);
    for (const r of rows) body.appendChild(el("tr", { className: "feedback-row" }, cells(r)));
    if (!rows.length) {
      body.appendChild(el("tr", {}, [el("td", { className: "empty-row", text: empty })]));
      body.firstChild.firstChild.colSpan = table.querySelectorAll("thead th").length;
    }
  }

  async function loadFeedback() {
    R.stopRefresh();
    const mine = R.nextSeq();
    const params = { since_s: String(Number($("window").value) || 3600) };
    if ($("feature").value) params.feature = $("feature").value;
    try {
      const [releases, questions] = await Promise.all([R.read("feedback", params), R.read("feedback_questions", params)]);
      if (!R.isCurrent(mine)) return;
      R.showBanner("");
      R.showSection("feedback");
      const matched = releases.filter((r) => r.feature !== "");
      const unmatched = releases.filter((r) => r.feature === "").reduce((n, r) => n + r.unmatched, 0);
      $("feedback-sub").textContent = unmatched ? unmatched + " not matched to a trace yet (or never)" : "every item matched to its trace";
      fill($("feedback-releases"), matched, (r) => [
        el("td", { text: r.feature }),
        el("td", { className: "mono", text: r.release || "(none)" }),
        ...figures(r),
      ], "No feedback in this window.");
      fill($("feedback-questions"), questions, (r) => [
        el("td", { text: r.feature }),
        el("td", { className: "question", title: r.group_id, text: r.question || r.group_id }),
        el("td", { className: "num", text: String(r.traces) }),
        ...figures(r),
      ], "No feedback on grouped questions in this window.");
      document.body.dataset.loaded = "feedback";
    } catch (err) {
      if (R.isCurrent(mine)) R.handleError(err);
    }
  }

  R.addRoute(/^#\/feedback$/, loadFeedback);
})();
