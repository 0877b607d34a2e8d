"""The error of an embedder that could not embed (the store's worker logs it and retries)."""

from __future__ import annotations

from ...errors import WebAgentsError


class EmbeddingError(WebAgentsError):
    """The embedder failed: its endpoint unreachable or refusing, or its answer malformed.

    The message says what to check. Nothing is lost: the texts can be embedded again later.
    """
