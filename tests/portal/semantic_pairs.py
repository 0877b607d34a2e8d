"""Pairs of a note and a query that share a meaning but no word, for semantic search's tests."""

from __future__ import annotations

import json
from pathlib import Path

PAIRS: list[dict[str, str]] = json.loads(
    (Path(__file__).parent / "data" / "semantic_pairs.json").read_text(encoding="utf-8")
)["pairs"]
