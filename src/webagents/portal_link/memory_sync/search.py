"""`memory_search`'s results from the portal (P7): the portal's hybrid (semantic and
full-text) search over the namespaces the caller's rights chose, labelled `from: portal`."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ...errors import WebAgentsError
from ...notes.note_file import first_line_summary
from .files import local_time
from .sync import PortalSync

log = logging.getLogger("webagents.memory")


async def portal_results(
    sync: PortalSync, query: str, namespaces: list[str], local: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The portal's search results over `namespaces` (the caller's readable ones, chosen by
    rights.py), labelled `from: portal`, less those already found here."""
    try:
        answer = await asyncio.to_thread(sync.search, query, namespaces)
    except WebAgentsError as exc:
        log.warning("memory: the portal's search did not answer: %s", exc)
        return [
            {
                "from": "portal",
                "unavailable": "the portal did not answer; these are this machine's results only",
            }
        ]
    seen = {(hit["namespace"], hit["key"]) for hit in local}
    results: list[dict[str, Any]] = []
    for entry in answer.entries:
        if (entry.namespace, entry.key) in seen:
            continue
        results.append(
            {
                "key": entry.key,
                "namespace": entry.namespace,
                "description": entry.description or first_line_summary(entry.content),
                "updated": local_time(entry.updated_at),
                "snippet": entry.content[:200],
                "from": "portal",
            }
        )
    if answer.semantic in ("off", "unavailable"):
        said = "off" if answer.semantic == "off" else "unavailable just now"
        results.append({"from": "portal", "note": f"the portal's semantic search is {said}"})
    return results
