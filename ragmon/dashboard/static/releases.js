// ragmon releases view: #/releases shows each release of the app seen in the window (service.version), per feature,
// side by side — first and last seen, requests, error rate, request p95, cost per request, and judged quality
// weighted back to all traffic — and a release filter that narrows the page to one release: its row and its
// numbers per stage. Read through the agent's named reads (`releases`, `report`; GET /api/read/…), production
// traffic. Text goes in through textContent only.
"use strict";

(function () {
  const R = window.ragmon;
  const { $, el, clear } = R;

  function fmtMs(v) {
    return v === null || v === undefined ? "–" : Math.round(v) + " ms";
  }

  function fmtQuality(q) {
    const w = q.weighted;
    if (w.mean === null) return "–";
    const ci = w.ci_low === null ? "" : " [" + w.ci_low.toFixed(2) + ", " + w.ci_high.toFixed(2) + "]";
    return w.mean.toFixed(2) + ci + " n=" + w.n;
  }

  function windowParams() {
    const params = { since_s: String(Number($("window").value) || 3600) };
    const feature = $("feature").value;
    if (feature) params.feature = feature;
    return params;
  }

  function drawFilter(all, chosen) {
    const select = $("release-filter");
    clear(select);
    const every = el("option", { text: "All releases" });
    every.value = "";
    select.appendChild(every);
    const names = [...new Set(all.map((r) => r.release))];
    for (const name of names) {
      const option = el("option", { text: name || "(no release sent)" });
      option.value = name;
      select.appendChild(option);
    }
    select.value = names.includes(chosen) ? chosen : "";
  }

  function drawReleases(rows) {
    const body = $("release-table").querySelector("tbody");
    clear(body);
    for (const r of rows) {
      const quality = el("td", { className: "release-quality" });
      for (const q of r.quality) quality.appendChild(el("div", { text: R.metricLabel(q.metric) + " " + fmtQuality(q) }));
      const row = el("tr", { className: "release-row" }, [
        el("td", { text: r.feature }),
        el("td", { className: "mono", text: r.release || "(none)" }),
        el("td", { text: r.environments.join(", ") || "–" }),
        el("td", { className: "mono nowrap", text: r.first_seen ? R.fmtTime(Date.parse(r.first_seen)) : "–" }),
        el("td", { className: "mono nowrap", text: r.last_seen ? R.fmtTime(Date.parse(r.last_seen)) : "–" }),
        el("td", { className: "num", text: String(r.requests) }),
        el("td", { className: "num", text: r.error_rate === null ? "–" : R.fmtPct(r.error_rate) }),
        el("td", { className: "num", text: fmtMs(r.p95_ms) }),
        el("td", { className: "num", text: r.cost_per_request_usd === null ? "–" : "$" + r.cost_per_request_usd.toFixed(5) }),
        quality,
      ]);
      row.dataset.release = r.release;
      body.appendChild(row);
    }
    if (!rows.length) body.appendChild(el("tr", {}, [el("td", { className: "empty-row", text: "No requests in this window." })]));
  }

  function drawStages(stages, release) {
    const table = $("release-stages");
    table.hidden = release === "";
    const body = table.querySelector("tbody");
    clear(body);
    for (const s of stages) {
      body.appendChild(el("tr", { className: "release-stage" }, [
        el("td", { text: s.feature }), el("td", { text: s.stage }), el("td", { className: "num", text: String(s.requests) }),
        el("td", { className: "num", text: s.error_rate === null ? "–" : R.fmtPct(s.error_rate) }),
        el("td", { className: "num", text: fmtMs(s.p95_ms) }),
      ]));
    }
  }

  async function loadReleases() {
    R.stopRefresh();
    const mine = R.nextSeq();
    const chosen = $("release-filter").value;
    try {
      const params = windowParams();
      const narrowed = chosen === "" ? params : { ...params, release: chosen };
      // One read after another: the agent runs few reads of a key at once (max_queries_per_tenant).
      await R.meta();
      const all = await R.read("releases", params);
      const rows = chosen === "" ? all : await R.read("releases", narrowed);
      const stages = chosen === "" ? [] : await R.read("report", narrowed);
      if (!R.isCurrent(mine)) return;
      R.showBanner("");
      R.showSection("releases");
      drawFilter(all, chosen);
      drawReleases(rows);
      drawStages(stages, $("release-filter").value);
      document.body.dataset.loaded = "releases";
    } catch (err) {
      if (R.isCurrent(mine)) R.handleError(err);
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("release-filter").addEventListener("change", () => {
      if (location.hash === "#/releases") loadReleases();
      else location.hash = "#/releases";
    });
  });
  R.addRoute(/^#\/releases$/, loadReleases);
})();
