// ragmon release comparison: #/compare?feature=F&baseline=A&candidate=B[&group=G] shows a candidate release against
// its baseline over the same span of traffic (the named read `compare`, what `ragmon compare` prints): every figure
// with both values, the delta and its 95 % interval and the sample sizes, then each recurring question worst first
// with the paragraphs it stopped retrieving and example traces. A canary alert links here, naming its group, which
// is marked and scrolled to. Text goes in through textContent only.
"use strict";

(function () {
  const R = window.ragmon;
  const { $, el, clear } = R;

  function num(v) {
    if (v === null || v === undefined) return "–";
    const a = Math.abs(v);
    return a >= 1000 ? v.toFixed(0) : a >= 1 ? v.toPrecision(4) : v.toPrecision(3);
  }

  function rowName(r) {
    return r.metric.replace(/_/g, " ") + (r.part ? " · " + r.part : "");
  }

  function table(rows, extraClass) {
    const body = el("tbody", {}, rows.map((r) =>
      el("tr", { className: "compare-row metric-" + r.metric + (r.regressed ? " regressed" : "") }, [
        el("td", { text: rowName(r) }),
        el("td", { className: "num", text: num(r.baseline) }),
        el("td", { className: "num", text: num(r.candidate) }),
        el("td", { className: "num", text: num(r.delta) }),
        el("td", { className: "num", text: r.ci_low === null ? "–" : num(r.ci_low) + " … " + num(r.ci_high) }),
        el("td", { className: "num", text: r.n_baseline + " / " + r.n_candidate }),
        el("td", { className: "muted", title: r.method, text: r.regressed ? "worse" : "" }),
      ])));
    return el("table", { className: "traces compare-table " + (extraClass || "") }, [
      el("thead", {}, [el("tr", {}, ["figure", "baseline", "candidate", "delta", "95 % CI of delta", "n", ""].map((h, i) =>
        el("th", { className: i && i < 6 ? "num" : "", text: h })))]),
      body,
    ]);
  }

  function drawGroup(g, focused) {
    const docs = g.documents.map((d) =>
      el("li", { className: "compare-doc" + (g.stopped_retrieving.includes(d.document) ? " lost" : ""), text:
        d.document + ": retrieved in " + Math.round(100 * d.baseline) + " % → " + Math.round(100 * d.candidate) + " % of its traces" }));
    const traces = g.example_traces.map((t) => el("a", { className: "mono", href: "#/trace/" + t, text: t.slice(0, 12) }));
    return el("div", { className: "card compare-group" + (g.regressed ? " regressed" : "") + (focused ? " focused" : ""), id: "group-" + g.group_id }, [
      el("div", { className: "card-head" }, [
        el("h3", { className: "compare-question", text: g.question }),
        el("span", { className: "sub", text: Math.round(100 * g.share) + " % of traffic · " + g.traces_baseline + " / " + g.traces_candidate + " traces" + (g.regressed ? " · regressed" : "") }),
      ]),
      table(g.rows),
      g.stopped_retrieving.length ? el("p", { className: "compare-lost", text: "Stopped being retrieved: " + g.stopped_retrieving.join(", ") }) : null,
      el("ul", { className: "compare-docs" }, docs),
      traces.length ? el("p", { className: "sub" }, [el("span", { text: "example traces: " }), ...traces]) : null,
    ]);
  }

  async function loadCompare(match) {
    R.stopRefresh();
    const params = new URLSearchParams(match[1] || "");
    const wanted = {};
    for (const key of ["feature", "baseline", "candidate"]) if (params.get(key)) wanted[key] = params.get(key);
    const focus = params.get("group");
    const mine = R.nextSeq();
    try {
      const doc = await R.read("compare", wanted);
      if (!R.isCurrent(mine)) return;
      R.showBanner("");
      R.showSection("compare");
      const groups = $("compare-groups");
      clear(groups);
      clear($("compare-overall"));
      if (doc.problem) {
        $("compare-title").textContent = "No comparison" + (doc.feature ? " for " + doc.feature : "");
        $("compare-sub").textContent = doc.problem;
        document.body.dataset.loaded = "compare";
        return;
      }
      $("compare-title").textContent = doc.feature + ": release " + doc.candidate.release + " against " + doc.baseline.release;
      $("compare-sub").textContent = doc.mode + " · " + doc.baseline.release + " " + doc.baseline.start.slice(0, 16) + " – " +
        doc.baseline.end.slice(0, 16) + " · " + doc.candidate.release + " " + doc.candidate.start.slice(0, 16) + " – " + doc.candidate.end.slice(0, 16);
      $("compare-overall").appendChild(table(doc.rows, "compare-overall-table"));
      for (const g of doc.groups) groups.appendChild(drawGroup(g, g.group_id === focus));
      if (!doc.groups.length) groups.appendChild(el("p", { className: "empty-row", text: "No recurring question with enough traffic in both releases." }));
      const target = focus ? document.getElementById("group-" + focus) : null;
      if (target) target.scrollIntoView(); else window.scrollTo(0, 0);
      document.body.dataset.loaded = "compare";
    } catch (err) {
      if (R.isCurrent(mine)) R.handleError(err);
    }
  }

  R.addRoute(/^#\/compare(?:\?(.*))?$/, loadCompare);
})();
