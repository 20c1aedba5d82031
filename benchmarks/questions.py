"""Recurring questions: how fast questions are grouped, and how fast the question-group view answers.

    .venv/bin/python benchmarks/questions.py [--questions 20000] [--spans 10000000] [--repeats 5] [--skip-view]

Grouping: `--questions` questions drawn from the paraphrase set of tests/questions (each intent's askings, with an
order number or a name varied in one in three so that part of the traffic is new text and part exact repeats),
grouped in batches of 500 as the question stage does per range, by the lexical grouper and — when the `embeddings`
extra is installed — by MiniLM; questions/s of each, and the share that hit the exact-repeat cache; then again with
no cache (every question encoded: the cost of text never seen).

View: the store `benchmarks/documents.py` fills (10M spans: 2M traces of five spans over 23 hours, one
`trace_questions` row per trace in 200 groups, a score for one trace in 20), then `Store.question_groups` over the
last 24 hours (and the 24 before), top 10, as a caller's read, `--repeats` times: median and slowest wall time.
The issue's bar: ≤ 200 ms on the embedded store over 10M spans.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragmon.sinks import open_store

from benchmarks.documents import fill, timed
from ragmon import minilm
from ragmon.questions import LexicalEncoder, MiniLMEncoder, QuestionGrouper
from tests.questions.paraphrases import INTENTS

NAMES = ["Anna", "Bo", "Chen", "Dara", "Emil", "Femi", "Gita", "Hugo"]


def traffic(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    askings = [q for questions in INTENTS.values() for q in questions]
    out = []
    for _ in range(n):
        q = rng.choice(askings)
        if rng.random() < 1 / 3:  # a particular the normaliser does not mask: new text for the grouper
            q = f"{rng.choice(NAMES)} here, {q[0].lower()}{q[1:]} (ref {rng.randrange(10**6)})"
        out.append(q)
    return out


def grouping_rate(grouper: QuestionGrouper, questions: list[str], batch: int = 500) -> float:
    began = time.perf_counter()
    for i in range(0, len(questions), batch):
        grouper.assign("acme", "support", questions[i : i + batch])
    return len(questions) / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--questions", type=int, default=20_000)
    parser.add_argument("--spans", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-view", action="store_true")
    args = parser.parse_args()
    questions = traffic(args.questions)
    groupers = [("lexical", LexicalEncoder())]
    if minilm.installed():
        groupers.append(("minilm", MiniLMEncoder()))
    for name, encoder in groupers:
        grouper = QuestionGrouper(encoder)
        rate = grouping_rate(grouper, questions)
        hits = grouper.counts["cache_hits"] / max(grouper.counts["questions"], 1)
        groups = len(grouper.groups("acme", "support"))
        print(f"grouping {name}: {rate:,.0f} questions/s ({hits:.0%} exact repeats, {groups} groups)")
        # every question through the encoder (no exact-repeat cache): the cost of new text
        uncached = QuestionGrouper(encoder, cache_size=0)
        sample = questions[: max(1, len(questions) // (10 if name == "minilm" else 1))]
        print(f"grouping {name}, no cache: {grouping_rate(uncached, sample):,.0f} questions/s")
    if args.skip_view:
        return
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(str(Path(tmp) / "store"))
        now_s = int(time.time())
        began = time.perf_counter()
        fill(store, args.spans // 5, now_s)
        print(f"filled {args.spans:,} spans in {time.perf_counter() - began:.0f} s")
        median, slowest, groups = timed(lambda: store.question_groups(86400, now_s=now_s, limit=10), args.repeats)
        print(f"question_groups view (24 h, top 10, {len(groups)} groups): median {median:.0f} ms, "
              f"slowest {slowest:.0f} ms")  # fmt: skip
        store.close()


if __name__ == "__main__":
    main()
