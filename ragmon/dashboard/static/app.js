// ragmon dashboard: reads /api/dashboard/* and draws with plotly.js (served by the agent, no CDN).
// Every piece of data reaches the page through textContent or plotly's text rendering of escaped strings —
// never innerHTML — so a passage holding "<script>" shows as text. The API key, when one is needed, lives in
// sessionStorage (this tab only) and travels as the x-api-key header.
"use strict";

(function () {
  const KEY_STORAGE = "ragmon.apiKey";
  const TRACE_ID = /^[0-9a-f]{32}$/;
  const REFRESH_MS = 30000;
  const METRIC_COLORS = ["#2563eb", "#16a34a", "#db2777", "#ea580c", "#7c3aed", "#0891b2", "#65a30d"];
  const MODEL_COLORS = ["#6366f1", "#f59e0b", "#10b981", "#ef4444", "#06b6d4", "#a855f7", "#84cc16", "#f97316"];
  const PLOT_CONFIG = { displayModeBar: false, responsive: true };
  const FONT = { family: "Inter, system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size: 12, color: "#334155" };

  // `seq` numbers overview loads: an answer to an older one (say, before the window changed) is dropped.
  // traffic: "production", "evaluation" (every eval run) or "run:NAME" (one `ragmon eval run`)
  // meta: the stages and judge metrics the agent names (/api/dashboard/meta), set before anything is drawn
  const state = { windowS: 3600, feature: "", traffic: "production", timer: null, seq: 0, meta: null };

  // --- DOM helpers (text only) -------------------------------------------------------------------------
  const $ = (id) => document.getElementById(id);

  function el(tag, options, children) {
    const node = document.createElement(tag);
    const opts = options || {};
    if (opts.className) node.className = opts.className;
    if (opts.id) node.id = opts.id;
    if (opts.text !== undefined && opts.text !== null) node.textContent = String(opts.text);
    if (opts.title) node.title = String(opts.title);
    if (opts.href) node.setAttribute("href", opts.href);
    for (const child of children || []) {
      if (child === null || child === undefined) continue;
      node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  // Plotly renders a small HTML-like markup in labels and hover text; entity-escaping every data string makes
  // it show literally (plotly decodes entities into text nodes).
  function plotText(value) {
    return String(value === null || value === undefined ? "" : value)
      .replace(/&/g, "&amp;")
      .replace(/</g, "&lt;")
      .replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;");
  }

  // --- formatting --------------------------------------------------------------------------------------
  function fmtMs(ms) {
    if (ms === null || ms === undefined) return "–";
    if (ms >= 10000) return (ms / 1000).toFixed(1) + " s";
    if (ms >= 1000) return (ms / 1000).toFixed(2) + " s";
    if (ms >= 100) return ms.toFixed(0) + " ms";
    if (ms >= 10) return ms.toFixed(1) + " ms";
    return ms.toFixed(2) + " ms";
  }
  function fmtUsd(v) {
    if (v === null || v === undefined) return "–";
    if (v === 0) return "$0";
    if (v < 0.01) return "$" + v.toPrecision(2);
    return "$" + v.toFixed(2);
  }
  function fmtInt(n) {
    return n === null || n === undefined ? "–" : Math.round(n).toLocaleString("en-US");
  }
  function fmtPct(v) {
    return v === null || v === undefined ? "–" : (100 * v).toFixed(v < 0.1 ? 1 : 0) + " %";
  }
  function fmtScore(v) {
    return v === null || v === undefined ? "–" : v.toFixed(2);
  }
  function fmtTime(ms) {
    if (!ms) return "–";
    return new Date(ms).toISOString().replace("T", " ").slice(0, 19);
  }
  // Within a day the clock time says enough; beyond, the date leads.
  function fmtShortTime(ms) {
    if (!ms) return "–";
    const iso = new Date(ms).toISOString();
    return state.windowS <= 86400 ? iso.slice(11, 19) : iso.slice(5, 10) + " " + iso.slice(11, 16);
  }
  // Stages and metrics come from the agent, in the order the page lists them; a stage it did not name is drawn
  // as the last one it named (the unclassified) and listed after it.
  function stageIndex(stage) {
    return state.meta.stages.findIndex((s) => s.name === stage);
  }
  function stageColor(stage) {
    const stages = state.meta.stages;
    const i = stageIndex(stage);
    return stages[i < 0 ? stages.length - 1 : i].color;
  }
  function stageRank(stage) {
    const i = stageIndex(stage);
    return i < 0 ? state.meta.stages.length : i;
  }
  function metricRank(metric) {
    const i = state.meta.metrics.findIndex((m) => m.name === metric);
    return i < 0 ? state.meta.metrics.length : i;
  }
  // The metric the trace list gives a column: the first the agent lists.
  function headlineMetric() {
    return state.meta.metrics[0].name;
  }
  function metricLabel(metric) {
    return metric.replace(/_/g, " ");
  }

  // --- API -----------------------------------------------------------------------------------------------
  class AuthRequired extends Error {}

  async function api(name, params, prefix) {
    const query = new URLSearchParams(params || {});
    const headers = { Accept: "application/json" };
    const key = sessionStorage.getItem(KEY_STORAGE);
    if (key) headers["x-api-key"] = key;
    const response = await fetch((prefix || "/api/dashboard/") + name + "?" + query.toString(), {
      headers,
      credentials: "omit",
      cache: "no-store",
    });
    if (response.status === 401) throw new AuthRequired("a valid API key is required");
    let body = null;
    try {
      body = await response.json();
    } catch (err) {
      throw new Error(name + ": HTTP " + response.status);
    }
    if (!response.ok) throw new Error(name + ": " + ((body && body.error) || "HTTP " + response.status));
    return body;
  }

  // The agent's stages and metrics, asked once per page (again only after a failed ask).
  let metaAnswer = null;
  function meta() {
    if (!metaAnswer) {
      metaAnswer = api("meta", {}).then((answer) => {
        state.meta = answer;
        return answer;
      }, (err) => {
        metaAnswer = null;
        throw err;
      });
    }
    return metaAnswer;
  }

  function windowParams() {
    const params = { since_s: String(state.windowS) };
    if (state.feature) params.feature = state.feature;
    if (state.traffic.startsWith("run:")) params.eval_run = state.traffic.slice(4);
    else params.traffic = state.traffic;
    return params;
  }

  // --- banner, login ---------------------------------------------------------------------------------------
  function showBanner(message) {
    const banner = $("banner");
    banner.textContent = message;
    banner.hidden = !message;
  }

  function showSection(name) {
    for (const id of ["login", "overview", "trace", "review", "review-trace", "conversation", "releases", "compare", "feedback", "documents", "questions"]) $(id).hidden = id !== name;
    $("controls").classList.toggle("disabled", name === "login");
  }

  function showLogin(message) {
    stopRefresh();
    showSection("login");
    const error = $("login-error");
    error.textContent = message || "";
    error.hidden = !message;
    $("login-key").focus();
  }

  function handleError(err) {
    if (err instanceof AuthRequired) {
      const hadKey = Boolean(sessionStorage.getItem(KEY_STORAGE));
      sessionStorage.removeItem(KEY_STORAGE);
      $("signout").hidden = true;
      showLogin(hadKey ? "That key was not accepted." : "");
      return;
    }
    showBanner(String(err && err.message ? err.message : err));
  }

  // --- charts ---------------------------------------------------------------------------------------------
  function baseLayout(extra) {
    return Object.assign(
      {
        font: FONT,
        margin: { l: 56, r: 16, t: 8, b: 40 },
        paper_bgcolor: "rgba(0,0,0,0)",
        plot_bgcolor: "rgba(0,0,0,0)",
        hoverlabel: { font: { family: FONT.family, size: 12 } },
        legend: { orientation: "h", y: -0.18, x: 0, font: { size: 11 } },
        xaxis: { gridcolor: "#eef2f7", zeroline: false },
        yaxis: { gridcolor: "#eef2f7", zeroline: false },
      },
      extra || {}
    );
  }

  function emptyChart(node, message) {
    if (window.Plotly) window.Plotly.purge(node);
    clear(node);
    node.appendChild(el("div", { className: "empty", text: message }));
  }

  function plot(node, traces, layout) {
    if (!window.Plotly) {
      emptyChart(node, "Charts need plotly: install ragmon[agent] on the agent.");
      return;
    }
    const placeholder = node.querySelector(".empty");
    if (placeholder) placeholder.remove();
    window.Plotly.react(node, traces, layout, PLOT_CONFIG);
  }

  // The whole window, even when data fills only part of it: an empty stretch is information too.
  function timeAxis(data) {
    return { type: "date", gridcolor: "#eef2f7", range: [data.start_ms, data.end_ms], zeroline: false };
  }

  function logAxis() {
    return { type: "log", dtick: 1, exponentformat: "none", ticksuffix: " ms", gridcolor: "#eef2f7", zeroline: false };
  }

  // Lines must not bridge buckets that had no data: a null between them breaks the line (connectgaps is off).
  function withGaps(tMs, stepS, columns) {
    const out = { t: [], cols: columns.map(() => []) };
    for (let i = 0; i < tMs.length; i++) {
      if (i > 0 && tMs[i] - tMs[i - 1] > stepS * 1000) {
        out.t.push(tMs[i - 1] + stepS * 1000);
        out.cols.forEach((col) => col.push(null));
      }
      out.t.push(tMs[i]);
      columns.forEach((col, j) => out.cols[j].push(col[i]));
    }
    return out;
  }

  function stepLabel(stepS) {
    if (stepS % 86400 === 0) return stepS / 86400 + " d";
    if (stepS % 3600 === 0) return stepS / 3600 + " h";
    return stepS / 60 + " min";
  }

  function drawLatency(data) {
    const node = $("chart-latency");
    const series = data.series.slice().sort((a, b) => stageRank(a.stage) - stageRank(b.stage));
    if (!series.length) return emptyChart(node, "No spans in this window.");
    const traces = [];
    for (const s of series) {
      const name = plotText(s.stage);
      const hover = s.t_ms.map((_, i) => fmtInt(s.spans[i]) + " spans, " + fmtInt(s.errors[i]) + " errors");
      const g = withGaps(s.t_ms, data.step_s, [s.p95_ms, s.p50_ms, hover]);
      traces.push({
        type: "scatter", mode: "lines+markers", name: name, legendgroup: name, x: g.t, y: g.cols[0],
        line: { color: stageColor(s.stage), width: 2 }, marker: { size: 5 },
        customdata: g.cols[2], hovertemplate: name + " p95 %{y:.1f} ms<br>%{customdata}<extra></extra>",
      });
      traces.push({
        type: "scatter", mode: "lines", name: name + " p50", legendgroup: name, showlegend: false,
        x: g.t, y: g.cols[1], line: { color: stageColor(s.stage), width: 1.25, dash: "dot" },
        hovertemplate: name + " p50 %{y:.1f} ms<extra></extra>",
      });
    }
    $("latency-sub").textContent = "p95 solid · p50 dotted · " + stepLabel(data.step_s) + " buckets (UTC)";
    plot(node, traces, baseLayout({ xaxis: timeAxis(data), yaxis: logAxis(), hovermode: "closest" }));
  }

  function drawStages(overview) {
    const node = $("chart-stages");
    const stages = overview.stages.slice().sort((a, b) => stageRank(a.stage) - stageRank(b.stage));
    if (!stages.length) return emptyChart(node, "No spans in this window.");
    const names = stages.map((s) => plotText(s.stage));
    const colors = stages.map((s) => stageColor(s.stage));
    plot(node, [
      {
        type: "bar", name: "p50", x: names, y: stages.map((s) => s.p50_ms), marker: { color: colors, opacity: 0.45 },
        hovertemplate: "%{x} p50 %{y:.1f} ms<extra></extra>",
      },
      {
        type: "bar", name: "p95", x: names, y: stages.map((s) => s.p95_ms), marker: { color: colors },
        customdata: stages.map((s) => fmtInt(s.spans) + " spans"),
        hovertemplate: "%{x} p95 %{y:.1f} ms · %{customdata}<extra></extra>",
      },
    ], baseLayout({ barmode: "group", bargap: 0.25, yaxis: logAxis(), showlegend: false, margin: { l: 64, r: 8, t: 8, b: 28 } }));
  }

  function drawCost(overview) {
    const node = $("chart-cost");
    const rows = overview.cost;
    if (!rows.length) {
      $("cost-sub").textContent = "";
      return emptyChart(node, "No model calls in this window.");
    }
    const totalCost = rows.reduce((sum, r) => sum + (r.cost_usd || 0), 0);
    // Local or unpriced models cost $0: tokens per feature and model are then the useful picture.
    const byCost = totalCost > 0;
    $("cost-title").textContent = byCost ? "Cost by feature and model" : "Tokens by feature and model";
    $("cost-sub").textContent = byCost ? fmtUsd(totalCost) + " in the window" : "no priced calls · tokens in + out";
    const features = Array.from(new Set(rows.map((r) => r.feature))).sort();
    const models = Array.from(new Set(rows.map((r) => r.model))).sort();
    const traces = models.map((model, i) => {
      const mine = features.map((f) => rows.find((r) => r.feature === f && r.model === model) || null);
      return {
        type: "bar", orientation: "h", name: plotText(model), y: features.map(plotText),
        x: mine.map((r) => (r ? (byCost ? r.cost_usd || 0 : r.input_tokens + r.output_tokens) : 0)),
        marker: { color: MODEL_COLORS[i % MODEL_COLORS.length] },
        customdata: mine.map((r) => (r ? fmtInt(r.calls) + " calls · " + fmtInt(r.input_tokens) + " in / " + fmtInt(r.output_tokens) + " out tokens · " + fmtUsd(r.cost_usd) : "")),
        hovertemplate: "%{y} · " + plotText(model) + "<br>%{customdata}<extra></extra>",
      };
    });
    plot(node, traces, baseLayout({
      barmode: "stack", bargap: 0.35, margin: { l: 16, r: 16, t: 8, b: 24 },
      legend: { orientation: "h", y: -0.22, x: 0, font: { size: 11 } },
      xaxis: { gridcolor: "#eef2f7", rangemode: "tozero", tickprefix: byCost ? "$" : "", zeroline: false },
      yaxis: { automargin: true, ticksuffix: "  " },
    }));
  }

  // The judge's agreement with people's labels (the review queue), beside the quality it reports: per metric, the
  // judge version with the most labels; a figure from fewer than `min_labels` labels says so.
  function drawAgreement(data) {
    const node = $("agreement");
    clear(node);
    const best = {};
    for (const v of data.versions) if (!best[v.metric] || v.n > best[v.metric].n) best[v.metric] = v;
    const metrics = Object.keys(best).sort();
    if (!metrics.length) {
      node.appendChild(el("span", { className: "muted", text: "No labels yet: label traces in the " }, [el("a", { href: "#/review", text: "review queue" })]));
      return;
    }
    for (const m of metrics) {
      const v = best[m];
      const figures = "κ " + fmtScore(v.kappa) + " · accuracy " + fmtPct(v.accuracy);
      node.appendChild(el("span", {
        className: "agreement" + (v.n < data.min_labels ? " few" : ""),
        title: "judge " + v.judge_version + " at threshold " + v.threshold.toFixed(3) + (v.warning ? " — " + v.warning : ""),
        text: metricLabel(m) + ": " + figures + " over " + v.n + " label" + (v.n === 1 ? "" : "s"),
      }));
    }
  }

  function drawQuality(data) {
    const node = $("chart-quality");
    if (!data.series.length) return emptyChart(node, "No judged traces in this window yet.");
    const traces = data.series.map((s, i) => {
      const name = plotText(metricLabel(s.metric));
      const details = s.n.map((n, j) => [n, s.plain[j] === null ? "–" : s.plain[j].toFixed(2), s.weight[j] === null ? "–" : s.weight[j].toFixed(1)]);
      const sizes = s.n.map((n) => Math.min(14, 5 + Math.sqrt(n)));  // more scores, bigger marker
      const g = withGaps(s.t_ms, data.step_s, [s.weighted, details, sizes]);
      return {
        type: "scatter", mode: "lines+markers", name: name, x: g.t, y: g.cols[0],
        line: { color: METRIC_COLORS[i % METRIC_COLORS.length], width: 2 },
        marker: { size: g.cols[2].map((v) => (v === null ? 0 : v)) },
        customdata: g.cols[1],
        hovertemplate: name + " %{y:.2f} (weighted)<br>unweighted %{customdata[1]} · %{customdata[0]} scores, weight %{customdata[2]}<extra></extra>",
      };
    });
    plot(node, traces, baseLayout({
      xaxis: timeAxis(data),
      yaxis: { range: [-0.02, 1.05], gridcolor: "#eef2f7", zeroline: false },
    }));
  }

  // --- overview pieces ------------------------------------------------------------------------------------
  function kpi(label, value, note, tone) {
    return el("div", { className: "kpi" + (tone ? " " + tone : "") }, [
      el("div", { className: "kpi-label", text: label }),
      el("div", { className: "kpi-value", text: value }),
      el("div", { className: "kpi-note", text: note || "" }),
    ]);
  }

  function drawKpis(overview, alerts) {
    const t = overview.totals;
    const node = $("kpis");
    clear(node);
    const severe = alerts.filter((a) => a.severity === "critical" || a.severity === "error").length;
    node.appendChild(kpi("Requests", fmtInt(t.requests), fmtInt(t.errors) + " failed"));
    node.appendChild(kpi("Error rate", fmtPct(t.error_rate), "of requests", t.error_rate > 0.05 ? "bad" : ""));
    node.appendChild(kpi("p95 latency", fmtMs(t.p95_ms), "whole request"));
    node.appendChild(kpi("Cost", fmtUsd(t.cost_usd), t.cost_usd === null ? "no priced calls" : "in the window"));
    node.appendChild(keptShareKpi(overview.sampling));
    node.appendChild(kpi("Open alerts", fmtInt(alerts.length), severe ? severe + " severe" : "", alerts.length ? "warn" : "good"));
  }

  // The tail sampler's kept share: each kept trace under its first reason, so the parts add up to the whole.
  function keptShareKpi(sampling) {
    const share = sampling.decided ? sampling.kept / sampling.decided : null;
    const parts = Object.entries(sampling.kept_by_reason).map(([reason, n]) => reason + " " + fmtPct(n / sampling.decided));
    const note = sampling.decided ? fmtInt(sampling.kept) + " of " + fmtInt(sampling.decided) + (parts.length ? ": " + parts.join(" · ") : "") : "no traces decided";
    return kpi("Kept with text", fmtPct(share), note);
  }

  function drawFeatures(features) {
    const select = $("feature");
    const current = state.feature;
    const known = Array.from(select.options).map((o) => o.value).slice(1);
    if (known.join("\u0000") === features.join("\u0000")) return;
    while (select.options.length > 1) select.remove(1);
    for (const feature of features) {
      const option = document.createElement("option");
      option.value = feature;
      option.textContent = feature;
      select.appendChild(option);
    }
    select.value = features.includes(current) ? current : "";
  }

  // The eval runs of the window, after the two fixed choices (production, every eval run).
  function drawEvalRuns(runs) {
    const select = $("traffic");
    const current = state.traffic;
    const names = runs.map((r) => r.eval_run);
    const chosen = current.startsWith("run:") ? current.slice(4) : null;
    if (chosen !== null && !names.includes(chosen)) names.push(chosen); // a chosen run stays listed
    const known = Array.from(select.options).map((o) => o.value).slice(2);
    if (known.join("\u0000") !== names.map((n) => "run:" + n).join("\u0000")) {
      while (select.options.length > 2) select.remove(2);
      for (const name of names) {
        const option = document.createElement("option");
        option.value = "run:" + name;
        option.textContent = "Eval run " + name;
        select.appendChild(option);
      }
    }
    select.value = current;
  }

  function reasonChips(reasons) {
    return el("span", { className: "chips" }, reasons.map((r) => el("span", { className: "chip reason-" + r.replace(/[^a-z_-]/gi, ""), text: r })));
  }

  function drawAlerts(alerts) {
    const list = $("alerts");
    clear(list);
    $("alerts-sub").textContent = alerts.length ? alerts.length + " firing" : "";
    if (!alerts.length) {
      list.appendChild(el("li", { className: "empty-row", text: "Nothing firing. Drift detectors and rules report here." }));
      return;
    }
    for (const a of alerts) {
      const scope = [a.feature, a.stage, a.metric].filter(Boolean).join(" · ");
      const figures = a.value !== null ? "value " + a.value.toPrecision(3) + (a.threshold !== null ? " vs " + a.threshold.toPrecision(3) : "") : "";
      list.appendChild(el("li", { className: "alert sev-" + String(a.severity).replace(/[^a-z]/gi, "") }, [
        el("div", { className: "alert-top" }, [
          el("span", { className: "sev", text: a.severity || "info" }),
          el("span", { className: "alert-rule", text: a.rule }),
          el("span", { className: "alert-time", text: fmtTime(a.fired_at_ms) }),
        ]),
        el("div", { className: "alert-msg", text: a.message }),
        el("div", { className: "alert-scope", text: [scope, figures].filter(Boolean).join(" — ") }),
        // an alert that says where links to what explains it (a canary alert: the release comparison, compare.js)
        a.labels && /^#\/compare\?/.test(a.labels.link || "") ? el("a", { className: "alert-link", href: a.labels.link, text: "the comparison →" }) : null,
      ]));
    }
  }

  function scoreCell(value) {
    if (value === null || value === undefined) return el("td", { className: "num muted", text: "–" });
    const tone = value >= 0.8 ? "good" : value >= 0.5 ? "warn" : "bad";
    return el("td", { className: "num" }, [el("span", { className: "score " + tone, text: value.toFixed(2) })]);
  }

  function drawTraces(traces) {
    const headline = headlineMetric();
    $("headline-metric").textContent = metricLabel(headline);
    const body = $("traces").querySelector("tbody");
    clear(body);
    if (!traces.length) {
      body.appendChild(el("tr", {}, [el("td", { className: "empty-row", text: "No kept traces in this window." })]));
      body.firstChild.firstChild.colSpan = 6;
      return;
    }
    for (const t of traces) {
      if (!TRACE_ID.test(t.trace_id)) continue;
      const row = el("tr", { className: "trace-row" + (t.errors ? " failed" : "") }, [
        el("td", { className: "mono nowrap", text: fmtShortTime(t.start_ms), title: fmtTime(t.start_ms) + " UTC" }),
        el("td", { text: t.feature }),
        el("td", { className: "question" }, [el("a", { href: "#/trace/" + t.trace_id, text: t.question || "(no question captured)", title: t.question })]),
        el("td", {}, [reasonChips(t.reasons)]),
        el("td", { className: "num", text: fmtMs(t.duration_ms) }),
        scoreCell(t.scores[headline]),
      ]);
      row.dataset.traceId = t.trace_id;
      row.addEventListener("click", (event) => {
        if (event.target.tagName !== "A") location.hash = "#/trace/" + t.trace_id;
      });
      body.appendChild(row);
    }
  }

  async function loadOverview() {
    const mine = ++state.seq;
    try {
      const params = windowParams();
      const [overview, latency, quality, alerts, traces, runs, agreement] = await Promise.all([
        api("overview", params), api("latency", params), api("quality", params), api("alerts", {}), api("traces", params),
        api("eval_runs", { since_s: String(state.windowS) }), api("agreement", {}), meta(),
      ]);
      if (mine !== state.seq || location.hash.startsWith("#/trace/") || extraRoutes.some((r) => r.pattern.test(location.hash))) return; // the user moved on meanwhile
      showBanner("");
      showSection("overview");
      $("signout").hidden = !sessionStorage.getItem(KEY_STORAGE);
      drawFeatures(overview.features);
      drawEvalRuns(runs);
      drawKpis(overview, alerts);
      drawLatency(latency);
      drawStages(overview);
      drawQuality(quality);
      drawAgreement(agreement);
      drawCost(overview);
      drawAlerts(alerts);
      drawTraces(traces);
      document.body.dataset.loaded = "overview";
    } catch (err) {
      if (mine === state.seq) handleError(err);
    }
  }

  // --- one trace ------------------------------------------------------------------------------------------
  function drawWaterfall(trace) {
    const node = $("chart-waterfall");
    const spans = trace.spans;
    $("waterfall-sub").textContent = spans.length ? spans.length + " spans · " + fmtMs(trace.duration_ms) : "";
    if (!spans.length) return emptyChart(node, "The spans of this trace have expired.");
    const labels = spans.map((s) => "\u2003".repeat(Math.min(s.depth, 6)) + plotText(s.name || s.stage));
    const details = spans.map((s) => {
      const parts = [plotText(s.stage), fmtMs(s.duration_ms) + " at +" + fmtMs(s.offset_ms)];
      if (s.model) parts.push(plotText(s.model));
      if (s.input_tokens || s.output_tokens) parts.push(s.input_tokens + " in / " + s.output_tokens + " out tokens");
      if (s.top1_score !== null) parts.push("rank-1 " + s.top1_score.toFixed(2));
      if (s.status === "error") parts.push("error " + plotText(s.error_type) + (s.error_message ? ": " + plotText(s.error_message.slice(0, 120)) : ""));
      return parts.join(" · ");
    });
    const ids = spans.map((_, i) => i);
    plot(node, [{
      type: "bar", orientation: "h", y: ids, x: spans.map((s) => Math.max(s.duration_ms || 0, trace.duration_ms / 400)),
      base: spans.map((s) => s.offset_ms),
      marker: {
        color: spans.map((s) => stageColor(s.stage)),
        line: { color: spans.map((s) => (s.status === "error" ? "#dc2626" : "rgba(0,0,0,0)")), width: 2 },
      },
      text: spans.map((s) => fmtMs(s.duration_ms)), textposition: "outside", cliponaxis: false,
      textfont: { size: 11, color: "#475569" },
      customdata: details, hovertemplate: "%{customdata}<extra></extra>",
    }], baseLayout({
      height: 70 + 30 * spans.length,
      margin: { l: 16, r: 60, t: 8, b: 36 },
      bargap: 0.35, showlegend: false,
      xaxis: { title: { text: "ms since the trace began", font: { size: 11 } }, gridcolor: "#eef2f7", rangemode: "tozero" },
      yaxis: { autorange: "reversed", tickvals: ids, ticktext: labels, gridcolor: "rgba(0,0,0,0)", automargin: true, ticksuffix: "  " },
    }));
  }

  function drawTraceHead(trace) {
    const head = $("trace-head");
    clear(head);
    const root = trace.spans.find((s) => s.depth === 0);
    const failed = trace.spans.filter((s) => s.status === "error");
    head.appendChild(el("h1", { text: trace.feature || (root ? root.name : "trace") }));
    const facts = el("div", { className: "facts" }, [
      el("span", { className: "mono", text: trace.trace_id }),
      el("span", { text: fmtTime(trace.start_ms || null) }),
      el("span", { text: fmtMs(trace.duration_ms) }),
      failed.length ? el("span", { className: "chip reason-error", text: failed.length + " failed span" + (failed.length > 1 ? "s" : "") }) : null,
      trace.eval_run ? el("span", { className: "chip", text: "eval run " + trace.eval_run }) : null,
    ]);
    if (trace.kept) {
      facts.appendChild(reasonChips(trace.reasons));
      const p = trace.inclusion_probability;
      facts.appendChild(el("span", { className: "muted", text: p !== null ? "kept with probability " + p.toPrecision(2) + " · weight " + (1 / p).toPrecision(3) : "" }));
    }
    head.appendChild(facts);
    // What went wrong, span by span: the first thing someone opening an error trace wants to read.
    if (failed.length) {
      head.appendChild(el("ul", { className: "span-errors", id: "trace-errors" }, failed.map((s) =>
        el("li", {}, [
          el("span", { className: "mono", text: s.name || s.stage }),
          el("span", { className: "chip reason-error", text: s.error_type || "error" }),
          el("span", { className: "text", text: s.error_message || "(no message recorded)" }),
        ]))));
    }
  }

  function drawPassages(trace) {
    const list = $("trace-passages");
    clear(list);
    const passages = trace.passages || [];
    if (!passages.length && trace.context_source === "prompt") {
      // no retrieval span in this trace: the judge's context was the prompt the model was given
      list.appendChild(el("li", { className: "empty-row", text: "No retrieval span: judged against the prompt below." }));
      for (const m of trace.messages || []) {
        list.appendChild(el("li", { className: "passage prompt-message" }, [
          el("div", { className: "passage-head" }, [el("span", { className: "mono passage-id", text: m.role })]),
          el("p", { className: "text passage-text", text: m.content }),
        ]));
      }
      return;
    }
    if (!passages.length) {
      list.appendChild(el("li", { className: "empty-row", text: trace.kept ? "No passages were captured." : "This trace's text was not kept." }));
      return;
    }
    const top = Math.max(...passages.map((p) => (p.score === null ? 0 : p.score)), 1e-9);
    for (const p of passages) {
      const bar = el("span", { className: "bar-fill" });
      bar.style.width = (p.score === null ? 0 : Math.max(2, (100 * p.score) / top)) + "%";
      list.appendChild(el("li", { className: "passage" }, [
        el("div", { className: "passage-head" }, [
          el("span", { className: "mono passage-id", text: p.id }),
          el("span", { className: "bar" }, [bar]),
          el("span", { className: "num passage-score", text: fmtScore(p.score) }),
        ]),
        el("p", { className: "text passage-text", text: p.text }),
      ]));
    }
  }

  function verdictTone(verdict) {
    const v = String(verdict).toLowerCase();
    if (v === "supported" || v === "yes" || v === "relevant") return "good";
    if (v === "unsupported" || v === "contradicted" || v === "no" || v === "irrelevant") return "bad";
    return "neutral";
  }

  function drawScores(trace) {
    const node = $("trace-scores");
    clear(node);
    if (!trace.scores.length) {
      node.appendChild(el("p", { className: "muted", text: trace.kept ? "Not judged yet." : "Only kept traces are judged." }));
      return;
    }
    // In the agent's order: the metric that says whether the answer can be trusted first, the retrieval metrics that
    // explain why not after.
    const scores = trace.scores.slice().sort((a, b) => metricRank(a.metric) - metricRank(b.metric) || (a.metric < b.metric ? -1 : 1));
    for (const s of scores) {
      const tone = s.value === null ? "neutral" : s.value >= 0.8 ? "good" : s.value >= 0.5 ? "warn" : "bad";
      const block = el("div", { className: "metric" }, [
        el("div", { className: "metric-head" }, [
          el("span", { className: "metric-name", text: metricLabel(s.metric) }),
          el("span", { className: "score " + tone, text: s.value === null ? s.status : s.value.toFixed(2) }),
        ]),
        s.explanation ? el("div", { className: "muted small", text: s.explanation }) : null,
      ]);
      if (s.claims.length) {
        const claims = el("ul", { className: "claims" });
        for (const c of s.claims) {
          claims.appendChild(el("li", { className: "claim" }, [
            el("span", { className: "verdict " + verdictTone(c.verdict), text: c.verdict }),
            el("span", { className: "claim-text", text: c.claim }),
            c.reason ? el("span", { className: "muted small claim-reason", text: c.reason }) : null,
          ]));
        }
        block.appendChild(claims);
      }
      node.appendChild(block);
    }
    // The judge's version, spelled as `ragmon report` and `scores.judge_version` spell it; its model in the tooltip.
    const judge = trace.scores[0];
    node.appendChild(el("p", { className: "muted small", id: "trace-judge", text: "judge: " + judge.judge_version, title: judge.judge_model ? "model: " + judge.judge_model : "" }));
  }

  function drawTools(trace) {
    const node = $("trace-tools");
    clear(node);
    if (!trace.tool_calls || !trace.tool_calls.length) return;
    node.appendChild(el("h2", { text: "Tool calls" }));
    for (const call of trace.tool_calls) {
      node.appendChild(el("div", { className: "tool" }, [
        el("span", { className: "mono", text: call.name }),
        el("span", { className: "muted small", text: " " + call.arguments }),
        el("p", { className: "text small", text: call.result }),
      ]));
    }
  }

  function noAnswer(trace) {
    if (!trace.kept) return "This trace's text was not kept.";
    if (trace.spans.some((s) => s.status === "error")) return "No answer: the request failed (see the errors above).";
    return "(no answer captured)";
  }

  async function loadTrace(traceId) {
    stopRefresh();
    const mine = ++state.seq;
    try {
      const [trace] = await Promise.all([api("trace", { id: traceId }), meta()]);
      if (mine !== state.seq) return;
      showBanner("");
      showSection("trace");
      $("signout").hidden = !sessionStorage.getItem(KEY_STORAGE);
      drawTraceHead(trace);
      $("trace-conversation").href = "#/conversation/" + trace.trace_id; // the turns around this one (conversation.js)
      drawWaterfall(trace);
      $("trace-question").textContent = trace.question || (trace.kept ? "(no question captured)" : "This trace's text was not kept.");
      const answer = $("trace-answer");
      answer.textContent = trace.answer || noAnswer(trace);
      answer.classList.toggle("missing", !trace.answer);
      drawTools(trace);
      drawScores(trace);
      drawPassages(trace);
      window.scrollTo(0, 0);
      document.body.dataset.loaded = "trace";
    } catch (err) {
      if (mine === state.seq) handleError(err);
    }
  }

  // --- routing, refresh -----------------------------------------------------------------------------------
  function stopRefresh() {
    if (state.timer) clearInterval(state.timer);
    state.timer = null;
  }

  function route() {
    document.body.dataset.loaded = "";
    const extra = extraRoutes.find((r) => r.pattern.test(location.hash));
    if (extra) {
      stopRefresh();
      extra.handler(extra.pattern.exec(location.hash));
      return;
    }
    const match = /^#\/trace\/([0-9a-f]{32})$/.exec(location.hash);
    if (match) {
      loadTrace(match[1]);
      return;
    }
    loadOverview();
    stopRefresh();
    state.timer = setInterval(() => {
      if (!document.hidden && !location.hash.startsWith("#/trace/") && !extraRoutes.some((r) => r.pattern.test(location.hash))) loadOverview();
    }, REFRESH_MS);
  }

  function init() {
    const saved = Number(localStorage.getItem("ragmon.windowS"));
    if (saved > 0) state.windowS = saved;
    $("window").value = String(state.windowS);
    if ($("window").value !== String(state.windowS)) state.windowS = Number($("window").value);
    $("window").addEventListener("change", (e) => {
      state.windowS = Number(e.target.value);
      localStorage.setItem("ragmon.windowS", String(state.windowS));
      location.hash = "#/";
      loadOverview();
    });
    $("feature").addEventListener("change", (e) => {
      state.feature = e.target.value;
      location.hash = "#/";
      loadOverview();
    });
    $("traffic").addEventListener("change", (e) => {
      state.traffic = e.target.value;
      location.hash = "#/";
      loadOverview();
    });
    $("refresh").addEventListener("click", route);
    $("signout").addEventListener("click", () => {
      sessionStorage.removeItem(KEY_STORAGE);
      showLogin("");
      $("signout").hidden = true;
    });
    $("login-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const key = $("login-key").value.trim();
      if (!key) return;
      sessionStorage.setItem(KEY_STORAGE, key);
      $("login-key").value = "";
      route();
    });
    window.addEventListener("hashchange", route);
    route();
  }

  // Pages kept in their own files (review.js) register their routes here and share the helpers above; the
  // object is frozen so no later script can swap a helper (say, `api`) for its own.
  const extraRoutes = [];
  window.ragmon = Object.freeze({
    $, el, clear, api, meta, metricLabel, read: (name, params) => api(name, params, "/api/read/"), apiKey: () => sessionStorage.getItem(KEY_STORAGE), setApiKey: (key) => sessionStorage.setItem(KEY_STORAGE, key),
    showSection, showBanner, handleError, fmtTime, fmtShortTime, fmtScore, fmtPct, verdictTone, TRACE_ID, stopRefresh,
    addRoute: (pattern, handler) => extraRoutes.push({ pattern, handler }),
    nextSeq: () => ++state.seq, isCurrent: (seq) => seq === state.seq,
    windowParams, // the window, feature and traffic chosen above, as a read's parameters (documents.js)
  });

  document.addEventListener("DOMContentLoaded", init);
})();
