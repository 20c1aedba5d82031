"""A store filled with labels and scores whose agreement figures are computed by hand below, for
`ragmon calibrate --from-store`. Run as `python -m tests.labels.agreement_case <store>` to fill a store in a
process of its own (the embedded engine serves one data path per process).

faithfulness, judge JUDGE (threshold 0.5: not a version with a threshold of its own), 12 labels by alice:

                 judge: yes  judge: no
    label: yes        5          2        (one of the two: the judge failed on it, no score — counted "no")
    label: no         1          4

    accuracy 9/12 = 0.75; p_e = (7/12)(6/12) + (5/12)(6/12) = 0.5; kappa = (0.75 - 0.5) / (1 - 0.5) = 0.5
    TPR 5/7, TNR 4/5, balanced accuracy (5/7 + 4/5) / 2 = 53/70

OTHER_JUDGE scored three of the same traces (two agree): its own row. One label was written twice by alice (the
second replaces the first). With `other_tenant`, globex has one labelled trace too (a false pass of JUDGE's),
which a key of acme's must not see.
"""

from __future__ import annotations

import sys
import time

from ragmon.sinks import Store, open_store

from tests.labels.known_labels import OTHER_JUDGE, keep, label, score, trace_id

# (label, JUDGE's score) per trace
CASES: list[tuple[bool, float | None]] = [
    *[(True, 0.9)] * 4,
    (True, 0.5),  # at the threshold: a yes
    (True, 0.3),
    (True, None),
    (False, 0.7),
    *[(False, 0.1)] * 4,
]
KAPPA, ACCURACY, TPR, TNR, BALANCED = 0.5, 0.75, 5 / 7, 4 / 5, 53 / 70
CONFUSION = {"tp": 5, "fn": 2, "fp": 1, "tn": 4}


def fill(store: Store, *, other_tenant: bool) -> None:
    ids = [trace_id(900 + i) for i in range(len(CASES))]
    keep(store, "acme", ids)
    score(store, "acme", {t: s for t, (_, s) in zip(ids, CASES, strict=True)})
    score(store, "acme", {ids[0]: 0.8, ids[1]: 0.2, ids[11]: 0.2}, version=OTHER_JUDGE)  # yes/yes, yes/no, no/no
    # alice first said the first trace was not faithful, then changed her mind: only the latest counts
    label(store, "acme", {ids[0]: False}, at_ns=time.time_ns() - 5_000_000_000)
    label(store, "acme", {t: y for t, (y, _) in zip(ids, CASES, strict=True)})
    if not other_tenant:
        return
    other = trace_id(999)
    keep(store, "globex", [other])
    score(store, "globex", {other: 0.9})
    label(store, "globex", {other: False}, reviewer="gina")


if __name__ == "__main__":
    opened = open_store(sys.argv[1])
    try:
        fill(opened, other_tenant=True)
    finally:
        opened.close()
