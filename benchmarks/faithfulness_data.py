"""Turn public human-labelled faithfulness data into the labelled-row layout `ragmon calibrate` and
benchmarks/fit_local_judge.py read (../shared/data/faithfulness/dev.jsonl's fields).

    python benchmarks/faithfulness_data.py summedits DIR OUT.jsonl[.gz]
        DIR holds summedits_<domain>.json, the SummEdits release (github.com/salesforce/factualNLG, data/summedits;
        Apache-2.0). data/faithfulness/summedits.jsonl.gz was made this way (data/README.md).
    python benchmarks/faithfulness_data.py begin FILE.tsv [FILE.tsv ...] OUT.jsonl[.gz]
        BEGIN's tab-separated release (github.com/google/BEGIN-dataset; each source's own licence): e.g. the
        Topical-Chat dev file, a grounded-dialogue source the shipped judge was never fitted on.
    python benchmarks/faithfulness_data.py faithdial-audit DIR OUT.jsonl[.gz]
        DIR is `data-audit/` of github.com/McGill-NLP/FaithDial (MIT): responses of three models and people on Wizard
        of Wikipedia, CMU-DoG and Topical-Chat, labelled with BEGIN's taxonomy by Dziri et al. (NAACL 2022, "On the
        origin of hallucinations in conversational models"). data/faithfulness/faithdial_audit.jsonl.gz was made
        this way (data/README.md).

Each row gets a `group`: the rows made from one source document (a summary and its edits, the turns about one
knowledge snippet) share it, and the fit/held-out split and the k-fold assignment follow it, so no document is on
both sides of a split. Rows are written in a fixed order, so the output is reproducible byte for byte.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

# What a summarising RAG app asks its model; the rows' answers are summaries of the whole document.
SUMMARY_QUESTION = "Summarise the document."
# As in the dev data: a generic reply ("that's cool") is neither attributable nor not, so it gets no label.
BEGIN_LABELS = {"Fully attributable": True, "Not fully attributable": False, "Generic": None}


# FaithDial's audit labels, lower-cased, with the release's typos. "uncooperative" marks a reply that is entailed but
# ignores the conversation: faithful to the knowledge, which is what the judge measures. Partial hallucination
# ("entailment,hallucination") is not faithful. A bare "Uncooperative" (a few gold rows) does not say whether the
# reply was entailed, so it gets no label, like a generic one.
AUDIT_LABELS = {
    "entailment": True,
    "entailment,uncooperative": True,
    "entailment. uncooperative": True,
    "entailmentt,uncooperative": True,
    "hallucination": False,
    "hallucinated": False,
    "partial hallucination": False,
    "entailment,hallucination": False,
    "generic": None,
    "uncooperative": None,
}
AUDIT_SOURCES = {"cmu": "cmu", "wow": "wow", "topical": "topicalchat", "topicalchat": "topicalchat"}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def summedits_rows(directory: Path) -> Iterator[dict[str, Any]]:
    for path in sorted(directory.glob("summedits_*.json")):
        domain = path.stem.removeprefix("summedits_")
        for item in json.loads(path.read_text(encoding="utf-8")):
            label = str(item["label"])
            if label not in ("0", "1"):
                continue
            yield {
                "id": f"summedits/{domain}/{item['id']}",
                "dataset": "summedits",
                "subset": domain,
                "task": "summarization",
                "group": f"summedits/{_digest(item['doc'])}",
                "question": SUMMARY_QUESTION,
                "context": [item["doc"]],
                "answer": item["summary"],
                "label": {
                    "faithful": label == "1",
                    "label_source": "SummEdits human annotation (1 consistent, 0 inconsistent)",
                },
                "meta": {"edit_types": item.get("edit_types", ""), "source_split": item.get("split", "")},
            }


def begin_rows(paths: Iterable[Path]) -> Iterator[dict[str, Any]]:
    csv.field_size_limit(sys.maxsize)
    for path in paths:
        with path.open(encoding="utf-8", newline="") as handle:
            for number, record in enumerate(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)):
                if record["begin_label"] not in BEGIN_LABELS:
                    continue
                source = record["data_source"]
                yield {
                    "id": f"begin/{path.stem}/{number}",
                    "dataset": "begin",
                    "subset": source,
                    "task": "grounded_dialogue",
                    "group": f"begin/{_digest(record['knowledge'])}",
                    "question": record["message"],
                    "context": [record["knowledge"]],
                    "answer": record["response"],
                    "label": {
                        "faithful": BEGIN_LABELS[record["begin_label"]],
                        "human_label": record["begin_label"],
                        "label_source": "BEGIN human annotation",
                    },
                    "meta": {"model": record["model_name"]},
                }


def faithdial_audit_rows(directory: Path) -> Iterator[dict[str, Any]]:
    csv.field_size_limit(sys.maxsize)
    for path in sorted(directory.glob("*/*.csv")):
        # gold/<source>.csv holds people's replies; <MODEL>/<model>_processed_<source>.csv a model's
        generator = path.parent.name.lower()
        source = AUDIT_SOURCES[path.stem.rsplit("_", 1)[-1]]
        with path.open(encoding="utf-8", newline="") as handle:
            for number, record in enumerate(csv.DictReader(handle)):
                # the gold files and the model files name their columns differently, in the same order
                knowledge, history, response, human_label = list(record.values())[:4]
                label = human_label.strip().lower()
                if label not in AUDIT_LABELS or not response.strip():
                    continue
                yield {
                    "id": f"faithdial-audit/{generator}/{source}/{number}",
                    "dataset": "faithdial_audit",
                    "subset": source,
                    "task": "grounded_dialogue",
                    "group": f"faithdial-audit/{_digest(knowledge)}",
                    "question": history,
                    "context": [knowledge],
                    "answer": response.strip(),
                    "label": {
                        "faithful": AUDIT_LABELS[label],
                        "human_label": human_label.strip(),
                        "label_source": "FaithDial data audit, BEGIN taxonomy",
                    },
                    "meta": {"generator": generator},
                }


def write_rows(rows: Iterable[dict[str, Any]], out: Path) -> int:
    count = 0
    with out.open("wb") as file:
        # no name and mtime 0 in a gzip header: the same rows give the same bytes
        binary = gzip.GzipFile(filename="", fileobj=file, mode="wb", mtime=0) if out.suffix == ".gz" else file
        with binary:
            for row in rows:
                binary.write((json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n").encode())
                count += 1
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", choices=("summedits", "begin", "faithdial-audit"))
    parser.add_argument(
        "inputs", nargs="+", type=Path, help="SummEdits' directory, BEGIN's TSV files, or FaithDial's data-audit/"
    )
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    if args.source == "summedits":
        rows = summedits_rows(args.inputs[0])
    elif args.source == "faithdial-audit":
        rows = faithdial_audit_rows(args.inputs[0])
    else:
        rows = begin_rows(args.inputs)
    count = write_rows(rows, args.out)
    print(f"{count} labelled rows → {args.out}")
    return 0 if count else 1


if __name__ == "__main__":
    raise SystemExit(main())
