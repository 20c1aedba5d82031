// ragmon conversation view: #/conversation/<trace id> shows the conversation that trace belongs to — its turns in
// order (question, answer, judge scores, latency, status, the users' feedback where there is some), with the
// conversation's own score — and #/conversations lists the conversations active lately. Read through the agent's
// named reads (`conversation`, `conversations`, GET /api/read/…). Text goes in through textContent only.
"use strict";

(function () {
  const R = window.ragmon;
  const { $, el, clear } = R;
  const METRICS_SHOWN = ["faithfulness", "answer_relevance", "context_relevance"];

  function pct(v) {
    return v === null || v === undefined ? "–" : Math.round(100 * v) + " %";
  }

  function scoreTone(v) {
    return v === null ? "neutral" : v >= 0.8 ? "good" : v >= 0.5 ? "warn" : "bad";
  }

  function drawScore(score) {
    const node = $("conversation-score");
    clear(node);
    const gaveUp = score.gave_up === null ? "still open" : score.gave_up ? "the user gave up" : "ended well";
    node.appendChild(el("span", { id: "conversation-turn-count", text: score.turns + " turn" + (score.turns === 1 ? "" : "s") }));
    node.appendChild(el("span", { id: "conversation-faithful", title: "share of the judged turns judged faithful", text: "faithful " + pct(score.faithful_share) + " of " + score.judged_turns + " judged" }));
    node.appendChild(el("span", { className: score.failed_turns ? "chip reason-error" : "chip", text: score.failed_turns + " failed" }));
    node.appendChild(el("span", { id: "conversation-gave-up", className: score.gave_up ? "chip reason-error" : "chip", text: gaveUp }));
    if (score.rephrased_turns.length) {
      node.appendChild(el("span", { className: "chip", text: "rephrased at turn " + score.rephrased_turns.map((i) => i + 1).join(", ") }));
    }
  }

  // "users: 👍 2 👎 1 · rated 4.0 · “comment”": what the turn's users said, briefly.
  function feedbackText(f) {
    const parts = [];
    if (f.thumbs_up || f.thumbs_down) parts.push("👍 " + f.thumbs_up + " 👎 " + f.thumbs_down);
    if (f.ratings) parts.push("rated " + f.mean_rating.toFixed(1));
    if (f.scores) parts.push(f.scores + " score" + (f.scores > 1 ? "s" : ""));
    if (f.comment) parts.push("“" + f.comment.slice(0, 80) + "”");
    return "users: " + parts.join(" · ");
  }

  function drawTurn(turn, current) {
    const scores = el("div", { className: "turn-scores" });
    for (const metric of METRICS_SHOWN) {
      const s = turn.scores[metric];
      if (!s) continue;
      scores.appendChild(el("span", { className: "score " + scoreTone(s.value), title: R.metricLabel(metric), text: R.metricLabel(metric) + " " + (s.value === null ? s.status : s.value.toFixed(2)) }));
    }
    // The users' own verdict on the turn, when the feedback table has one for it.
    const feedback = turn.feedback ? el("span", { className: "chip turn-feedback" + (turn.feedback.negative * 2 >= turn.feedback.verdicts && turn.feedback.verdicts ? " reason-error" : ""), title: turn.feedback.comment || "", text: feedbackText(turn.feedback) }) : null;
    const notKept = "This turn's text was not kept.";
    return el("li", { className: "turn" + (current ? " current" : "") + (turn.status === "error" ? " failed" : ""), id: "turn-" + turn.trace_id }, [
      el("div", { className: "turn-head" }, [
        el("span", { className: "turn-number", text: "turn " + turn.turn }),
        el("a", { className: "mono", href: "#/trace/" + turn.trace_id, text: turn.trace_id.slice(0, 12) }),
        el("span", { className: "muted", text: turn.started.replace("T", " ").slice(0, 19) }),
        el("span", { className: "num", text: Math.round(turn.latency_ms) + " ms" }),
        turn.status === "error" ? el("span", { className: "chip reason-error", text: turn.error_type || "error" }) : null,
        scores,
        feedback,
      ]),
      el("p", { className: "text turn-question", text: turn.kept ? turn.question || "(no question captured)" : notKept }),
      el("p", { className: "text answer turn-answer" + (turn.answer ? "" : " missing"), text: turn.kept ? turn.answer || "(no answer)" : "" }),
    ]);
  }

  async function loadConversation(match) {
    R.stopRefresh();
    const traceId = match[1];
    const mine = R.nextSeq();
    try {
      const [conversation] = await Promise.all([R.read("conversation", { trace_id: traceId }), R.meta()]);
      if (!R.isCurrent(mine)) return;
      R.showBanner("");
      R.showSection("conversation");
      $("conversation-list").hidden = true;
      $("conversation-title").textContent = conversation.session ? "Conversation " + conversation.session : "A trace without a session";
      $("conversation-sub").textContent = "turns in the order they were asked; the turn you came from is marked";
      drawScore(conversation.score);
      const list = $("conversation-turns");
      clear(list);
      for (const turn of conversation.turns) list.appendChild(drawTurn(turn, turn.trace_id === traceId));
      if (!conversation.turns.length) list.appendChild(el("li", { className: "empty-row", text: "No turns found (they may have expired)." }));
      window.scrollTo(0, 0);
      document.body.dataset.loaded = "conversation";
    } catch (err) {
      if (R.isCurrent(mine)) R.handleError(err);
    }
  }

  async function loadConversations() {
    R.stopRefresh();
    const mine = R.nextSeq();
    try {
      const listed = await R.read("conversations", { since_s: String(Number($("window").value) || 86400) });
      if (!R.isCurrent(mine)) return;
      R.showBanner("");
      R.showSection("conversation");
      $("conversation-title").textContent = "Conversations";
      $("conversation-sub").textContent = "most recently active first, with each conversation's own score";
      clear($("conversation-score"));
      clear($("conversation-turns"));
      const table = $("conversation-list");
      table.hidden = false;
      const body = table.querySelector("tbody");
      clear(body);
      for (const c of listed) {
        const s = c.score;
        const row = el("tr", { className: "trace-row conversation-row" }, [
          el("td", { className: "mono nowrap", text: c.last_start.replace("T", " ").slice(0, 19) }),
          el("td", {}, [el("a", { href: "#/conversation/" + c.first_trace, text: c.session })]),
          el("td", { text: c.feature }),
          el("td", { className: "num", text: String(c.turns) }),
          el("td", { className: "num", text: pct(s.faithful_share) }),
          el("td", { text: s.gave_up === null ? "open" : s.gave_up ? "yes" : "no" }),
          el("td", { className: "num", text: String(s.rephrased_turns.length) }),
        ]);
        body.appendChild(row);
      }
      if (!listed.length) body.appendChild(el("tr", {}, [el("td", { className: "empty-row", text: "No conversations in this window." })]));
      document.body.dataset.loaded = "conversations";
    } catch (err) {
      if (R.isCurrent(mine)) R.handleError(err);
    }
  }

  R.addRoute(/^#\/conversation\/([0-9a-f]{32})$/, loadConversation);
  R.addRoute(/^#\/conversations$/, loadConversations);
})();
