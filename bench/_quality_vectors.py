"""The local model's vectors of bench/search_quality.py's texts, computed once and kept in a
file (100,000 notes take the model some ten minutes on a quiet machine): keyed by the
generator's version and seed, extended by the texts it lacks, each file written atomically."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from webagents.portal.embeddings import Embedder

Vectors = npt.NDArray[np.float32]
CHUNK = 2048  # texts embedded between two writes of the cache


class VectorCache:
    def __init__(self, folder: Path, version: int, seed: int, embedder: Embedder) -> None:
        self.embedder = embedder
        self.base = folder / f"v{version}-seed{seed}-{embedder.name}"
        self.texts: list[str] = []
        self.vectors: Vectors = np.zeros((0, embedder.dimensions), np.float32)
        if self.base.with_suffix(".npy").exists():
            texts = json.loads(self.base.with_suffix(".json").read_text())
            vectors = np.load(self.base.with_suffix(".npy"))
            # Both only grow, in one order: a run stopped between the two writes leaves one
            # longer, and the common prefix is right.
            kept = min(len(texts), len(vectors))
            self.texts, self.vectors = texts[:kept], vectors[:kept]
        self.row = {text: n for n, text in enumerate(self.texts)}

    def of(self, texts: Sequence[str]) -> Vectors:
        """The vectors of `texts`, in order; those not cached are embedded (and cached)."""
        missing = list(dict.fromkeys(t for t in texts if t not in self.row))
        began = time.perf_counter()
        for start in range(0, len(missing), CHUNK):
            chunk = missing[start : start + CHUNK]
            made = np.asarray(self.embedder.embed(chunk), np.float32)
            for text in chunk:
                self.row[text] = len(self.texts)
                self.texts.append(text)
            self.vectors = np.concatenate([self.vectors, made])
            self._write()
            done = start + len(chunk)
            rate = done / (time.perf_counter() - began)
            print(f"  embedded {done}/{len(missing)} ({rate:.0f}/s)", file=sys.stderr, flush=True)
        return self.vectors[[self.row[t] for t in texts]]

    def _write(self) -> None:
        self.base.parent.mkdir(parents=True, exist_ok=True)
        for suffix, write in (
            (".npy", lambda f: np.save(f, self.vectors)),
            (".json", lambda f: f.write(json.dumps(self.texts).encode())),
        ):
            part = self.base.with_suffix(suffix + ".part")
            with part.open("wb") as f:
                write(f)
            os.replace(part, self.base.with_suffix(suffix))
