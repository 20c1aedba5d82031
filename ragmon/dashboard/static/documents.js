// ragmon documents view: #/documents shows, over the window and feature chosen above, the documents answers were
// built on (each answer's final context: the reranker's output when the feature reranks, else the retriever's; a
// document is its paragraph or source where the app names one, else its chunk id) — how often and at which rank,
// for which recurring question, how the answers built on it were judged — then the documents that keep appearing
// in answers judged unfaithful or unhelpful, and, for two releases given, the documents each question group
// stopped or started retrieving. Read through the agent's named reads (`documents`, `problem_documents`,
// `document_shift`, GET /api/read/…). Text goes in through textContent only.
"use strict";

(function () {
  const R = window.ragmon;
  const { $, el, clear } = R;

  function pct(v) {
    return v === null || v === undefined ? "–" : Math.round(100 * v) + " %";
  }

  function signedPct(v) {
    return v === null || v === undefined ? "–" : (v > 0 ? "+" : "") + Math.round(100 * v) + " pts";
  }

  function emptyRow(body, text) {
    body.appendChild(el("tr", {}, [el("td", { className: "empty-row", text: text })]));
  }

  function drawTop(docs) {
    const body = $("documents-top").querySelector("tbody");
    clear(body);
    for (const d of docs) {
      const group = d.groups.length ? d.groups[0] : null;
      body.appendChild(
        el("tr", { className: "document-row" }, [
          el("td", { text: d.feature }),
          el("td", { className: "mono document-name", text: d.doc }),
          el("td", { className: "num", text: String(d.retrieved) }),
          el("td", { className: "num", text: String(d.traces) }),
          el("td", { className: "num", text: d.mean_rank.toFixed(1) }),
          el("td", { className: "num", text: String(d.first) }),
          el("td", { className: "num", text: String(d.chunks) }),
          el("td", { className: "num document-unfaithful", text: pct(d.unfaithful_share) }),
          el("td", { className: "document-group", title: group ? group.group_id : "", text: group ? group.label || group.example : "–" }),
        ])
      );
    }
    if (!docs.length) emptyRow(body, "No retrieved documents in this window.");
  }

  function drawProblems(problems) {
    const body = $("documents-problems").querySelector("tbody");
    clear(body);
    for (const p of problems) {
      body.appendChild(
        el("tr", { className: "problem-row" }, [
          el("td", { text: p.feature }),
          el("td", { className: "mono document-name", text: p.doc }),
          el("td", { className: "num", text: p.bad + "/" + p.judged }),
          el("td", { className: "num problem-share", text: pct(p.bad_share) }),
          el("td", { className: "num", text: pct(p.baseline_share) }),
          el("td", { className: "num", text: p.z === null ? "–" : p.z.toFixed(1) }),
        ])
      );
    }
    if (!problems.length) emptyRow(body, "No document is judged bad more often than its feature's answers.");
  }

  function drawShift(groups) {
    const list = $("documents-shift-groups");
    clear(list);
    for (const g of groups) {
      const rows = g.documents.map((d) =>
        el("tr", { className: "shift-row" + (d.change !== null && d.change < 0 ? " lost" : "") }, [
          el("td", { className: "mono document-name", text: d.doc }),
          el("td", { className: "num", text: pct(d.share_a) }),
          el("td", { className: "num", text: pct(d.share_b) }),
          el("td", { className: "num shift-change", text: signedPct(d.change) }),
          el("td", { className: "num", text: d.z === null ? "–" : d.z.toFixed(1) }),
        ])
      );
      list.appendChild(
        el("li", { className: "shift-group" }, [
          el("div", { className: "turn-head" }, [
            el("strong", { className: "shift-question", text: g.label || g.example || g.group_id }),
            el("span", { className: "muted", text: g.feature + " · " + g.traces_a + " traces in A, " + g.traces_b + " in B" }),
          ]),
          el("table", { className: "traces" }, [
            el("thead", {}, [el("tr", {}, ["document", "share A", "share B", "change", "z"].map((h) => el("th", { text: h })))]),
            el("tbody", {}, rows),
          ]),
        ])
      );
    }
    if (!groups.length) list.appendChild(el("li", { className: "empty-row", text: "No question group has traces of these releases in this window." }));
  }

  async function loadShift() {
    const a = $("documents-release-a").value.trim();
    const b = $("documents-release-b").value.trim();
    if (!a || !b) return;
    const params = Object.assign(R.windowParams(), { release_a: a, release_b: b });
    try {
      drawShift(await R.read("document_shift", params));
      document.body.dataset.shift = a + ".." + b;
    } catch (err) {
      R.handleError(err);
    }
  }

  async function loadDocuments() {
    R.stopRefresh();
    const mine = R.nextSeq();
    try {
      const params = R.windowParams();
      const [docs, problems] = await Promise.all([
        R.read("documents", Object.assign({ limit: "50" }, params)),
        R.read("problem_documents", params),
        R.meta(),
      ]);
      if (!R.isCurrent(mine)) return;
      R.showBanner("");
      R.showSection("documents");
      drawTop(docs);
      drawProblems(problems);
      document.body.dataset.loaded = "documents";
    } catch (err) {
      if (R.isCurrent(mine)) R.handleError(err);
    }
  }

  $("documents-shift-form").addEventListener("submit", (event) => {
    event.preventDefault();
    loadShift();
  });
  R.addRoute(/^#\/documents$/, loadDocuments);
})();
