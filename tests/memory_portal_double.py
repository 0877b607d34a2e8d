"""A stand-in for the portal's memory store (SPEC P5) in this process, for the sync's unit
tests that need to stop the portal, crash between two steps or count requests: the HTTP
contract as P5 states it (paths, query parameters, bodies, answers, the 409 of a stale
`content_sha256`), with every change kept as a version. The acceptance tests use the real
portal (tests/portal/test_memory_sync_*.py)."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from webagents.portal_link.client import PortalClient

AGENT = "6c1f6c9e-2f0e-4d53-a7a4-1f5d2c3b4a59"
KEY = "rok_agent_test_key"
OPAQUE = "v2/kB+x= &feed#"
"""The opaque cursors' prefix: characters that a client must escape in a query to send back."""


def sha(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


@dataclass
class MemoryDouble:
    entries: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    versions: list[dict[str, Any]] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)
    up: bool = True
    requests: list[str] = field(default_factory=list)
    page: int = 3
    cursors: str = "decimal"
    """How its cursors look: "decimal" strings as our portal's, "number" (an older portal's
    integers), or "opaque" (a string a client cannot take apart: OPAQUE and the number)."""
    sinces: list[str | None] = field(default_factory=list)
    """The `since` of every pull, as it arrived."""

    def client(self) -> PortalClient:
        client = PortalClient("http://portal.test", KEY)
        client._http = httpx.Client(
            base_url="http://portal.test",
            headers={"Authorization": f"Bearer {KEY}"},
            transport=httpx.MockTransport(self.handle),
        )
        return client

    def _cursor(self, seq: int) -> Any:
        if self.cursors == "opaque":
            return f"{OPAQUE}{seq}"
        return seq if self.cursors == "number" else str(seq)

    def _since(self, given: str | None) -> int | None:
        """The change number of a cursor sent back; None for one this portal never gave."""
        if not given:
            return 0
        if self.cursors == "opaque":
            given = given.removeprefix(OPAQUE) if given.startswith(OPAQUE) else "x"
        return int(given) if given.isdigit() else None

    def versions_of(self, namespace: str, key: str) -> list[str]:
        return [
            v["content"] for v in self.versions if (v["namespace"], v["key"]) == (namespace, key)
        ]

    def handle(self, request: httpx.Request) -> httpx.Response:
        if not self.up:
            raise httpx.ConnectError("connection refused", request=request)
        if request.headers.get("authorization") != f"Bearer {KEY}":
            return httpx.Response(401, json={"error": {"message": "not signed in"}})
        query = request.url.params
        action = query.get("action")
        self.requests.append(f"{request.method} {action or ''}".strip())
        if request.method == "GET" and action == "get":
            found = self.entries.get((query["namespace"], query["key"]))
            return httpx.Response(200, json={"entry": found})
        if request.method == "GET" and action == "search":
            words = set(query["q"].lower().split())
            wanted = set(query.get_list("namespace"))
            hits = [
                e
                for (ns, _), e in self.entries.items()
                if ns in wanted and words & set(e["content"].lower().split())
            ]
            return httpx.Response(200, json={"entries": hits})
        if request.method == "GET" and action == "sync":
            namespace = query.get("namespace")
            self.sinces.append(query.get("since"))
            since = self._since(query.get("since"))
            if since is None:
                error = {"message": "since is not a cursor of mine", "code": "bad_cursor"}
                return httpx.Response(400, json={"error": error})
            lines = [
                c for c in self.changes if c["seq"] > since and namespace in (None, c["namespace"])
            ]
            chunk = lines[: self.page]
            cursor = chunk[-1]["seq"] if chunk else since
            out = [{k: v for k, v in c.items() if k != "seq"} for c in chunk]
            return httpx.Response(
                200,
                json={
                    "lines": out,
                    "cursor": self._cursor(cursor),
                    "more": len(lines) > len(chunk),
                },
            )
        if request.method == "PUT":
            body = json.loads(request.content)
            where = (body["namespace"], body["key"])
            current = self.entries.get(where)
            precondition = body.get("content_sha256")
            if precondition is not None and precondition != (
                sha(current["content"]) if current else ""
            ):
                return httpx.Response(409, json={"error": {"message": "the entry changed"}})
            if current is not None and (current["content"], current["description"]) == (
                body["content"],
                body.get("description") or "",
            ):
                return httpx.Response(200, json={"entry": current})  # no change, no version
            return httpx.Response(200, json={"entry": self._put(body, current)})
        if request.method == "DELETE":
            where = (query["namespace"], query["key"])
            current = self.entries.get(where)
            precondition = query.get("content_sha256")
            if precondition is not None and precondition != (
                sha(current["content"]) if current else ""
            ):
                return httpx.Response(409, json={"error": {"message": "the entry changed"}})
            if current is None:
                return httpx.Response(200, json={"forgotten": False})
            del self.entries[where]
            self._change("delete", current, current["updated_at"])
            return httpx.Response(200, json={"forgotten": True})
        return httpx.Response(400, json={"error": {"message": "unknown request"}})

    def _put(self, body: dict[str, Any], current: dict[str, Any] | None) -> dict[str, Any]:
        at = body.get("at") or datetime.now(UTC).isoformat()
        entry = {
            "id": str(
                uuid.uuid5(uuid.NAMESPACE_URL, f"{AGENT}\n{body['namespace']}\n{body['key']}")
            ),
            "namespace": body["namespace"],
            "key": body["key"],
            "content": body["content"],
            "description": body.get("description") or "",
            "source": body.get("source") or "",
            "created_at": current["created_at"] if current else at,
            "updated_at": at,
        }
        self.entries[(body["namespace"], body["key"])] = entry
        self._change("put", entry, at)
        return entry

    def _change(self, op: str, entry: dict[str, Any], at: str) -> None:
        self.versions.append({**entry, "op": op})
        self.changes.append(
            {
                "seq": len(self.changes) + 1,
                "op": op,
                "id": entry["id"],
                "namespace": entry["namespace"],
                "key": entry["key"],
                "content": entry["content"] if op == "put" else None,
                "description": entry["description"],
                "source": entry["source"],
                "at": at,
            }
        )

    def edit(self, namespace: str, key: str, content: str, at: str) -> None:
        """A change made elsewhere (another machine, the owner's page)."""
        body = {"namespace": namespace, "key": key, "content": content, "at": at}
        self._put(body, self.entries.get((namespace, key)))
