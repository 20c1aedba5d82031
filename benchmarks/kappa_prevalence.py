"""How Cohen's κ of the local judge moves with the share of faithful answers alone, the judge unchanged.

    python benchmarks/kappa_prevalence.py ../shared/data/faithfulness/dev.jsonl [--kind begin] [--split fit]
        [--shares 0.4,0.3,0.2,0.15] [--draws 20]

κ is not a property of a judge alone: with the same true- and false-positive rates it falls as one class gets rare
(the chance agreement it discounts grows). This script scores the rows of one kind once, then draws subsets in which
the faithful answers make up each share asked for (every unfaithful row, a random sample of the faithful ones; several
draws, fixed seeds) and prints κ at the judge's own threshold, the κ at the best threshold for that subset (an upper
bound no deployment gets), balanced accuracy and AUC — the last two do not depend on the share. Read a κ measured on
new data beside its faithful share before reading it as the judge getting worse.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragmon.judges.calibration import (
    Split,
    agreement,
    fit_threshold,
    load_rows,
    ranking_auc,
    score_rows,
)
from ragmon.judges.local_judge import LocalJudge


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", metavar="file")
    parser.add_argument("--kind", default="begin", help="the dataset kind to resample (default: begin)")
    parser.add_argument("--split", choices=("all", "fit", "heldout"), default="fit")
    parser.add_argument("--shares", default="0.4,0.3,0.2,0.15", help="faithful shares to draw")
    parser.add_argument("--draws", type=int, default=20)
    args = parser.parse_args(argv)
    split: Split = args.split

    rows = [r for file in args.files for r in load_rows(file, split) if r.dataset == args.kind]
    if not rows:
        print(f"no labelled {args.kind} rows in the {split} split", file=sys.stderr)
        return 2
    judge = LocalJudge(use_minilm=False)
    values = asyncio.run(score_rows(judge, rows))
    scored = [(v if v is not None else float("-inf"), r.faithful) for v, r in zip(values, rows, strict=True)]
    faithful = [pair for pair in scored if pair[1]]
    unfaithful = [pair for pair in scored if not pair[1]]
    threshold = judge.faithfulness_threshold
    print(
        f"{judge.version}, {args.kind} ({split} split): {len(rows)} rows, faithful share "
        f"{len(faithful) / len(rows):.3f}; threshold {threshold:.3f}; {args.draws} draws per share"
    )
    print(f"{'share':>6}{'n':>7}{'κ':>8}{'κ best t':>10}{'best t':>8}{'bal acc':>9}{'auc':>7}")
    for share in (float(s) for s in args.shares.split(",")):
        wanted = int(share * len(unfaithful) / (1 - share))
        if wanted > len(faithful):
            print(f"{share:>6.3f}  needs {wanted} faithful rows, has {len(faithful)}")
            continue
        kappas, best_kappas, best_ts, balanced, aucs = [], [], [], [], []
        for draw in range(args.draws):
            subset = random.Random(draw).sample(faithful, wanted) + unfaithful
            scores, labels = [s for s, _ in subset], [y for _, y in subset]
            figures = agreement(labels, [s >= threshold for s in scores])
            best_t = fit_threshold(scores, labels)
            kappas.append(figures["kappa"] or 0.0)
            balanced.append(figures["balanced_accuracy"] or 0.0)
            best_ts.append(best_t)
            best_kappas.append(agreement(labels, [s >= best_t for s in scores])["kappa"] or 0.0)
            aucs.append(ranking_auc(scores, labels) or 0.0)
        mean = statistics.fmean
        print(
            f"{share:>6.3f}{len(subset):>7}{mean(kappas):>8.3f}{mean(best_kappas):>10.3f}{mean(best_ts):>8.3f}"
            f"{mean(balanced):>9.3f}{mean(aucs):>7.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
