"""Which namespaces a caller may read and write (M2): the one place that decides.

A pure function of the verified `Caller`. The file store, the index, the prompt block, the
tools, `/memory`, the kept conversations (S5) and the portal sync (`sync`) all ask here;
nothing else decides access.

| caller                           | reads                | writes            | conversations |
|----------------------------------|----------------------|-------------------|---------------|
| owner                            | every namespace      | `owner`, `shared` | the owner's * |
| verified caller / channel sender | its own and `shared` | its own           | its own       |
| nobody verified (or unnameable)  | `shared`             | nothing           | none kept     |

* kept under `owner`; the owner also reads (never changes) every caller's kept conversations.

"Its own" is `Caller.namespace`: `caller:<identity>` for an API key's caller,
`caller:jwt:<issuer>#<identity>` for a JWT issuer's (`caller:<identity>` when the issuer has
`plain_identity: true`), `caller:channel:<type>:<id>` for a channel sender.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .caller import OWNER_NAMESPACE, SHARED_NAMESPACE, Caller


@dataclass(frozen=True, slots=True)
class Rights:
    own: str | None
    """The caller's own namespace: where its notes and episodes go, and read first."""
    reads_all: bool
    writable: frozenset[str]
    readable_named: frozenset[str]
    """The namespaces readable by name (for everyone but the owner, all it may read)."""

    def can_read(self, namespace: str) -> bool:
        return self.reads_all or namespace in self.readable_named

    def can_write(self, namespace: str) -> bool:
        return namespace in self.writable

    @property
    def can_write_any(self) -> bool:
        return bool(self.writable)

    def readable(self, existing: Iterable[str]) -> list[str]:
        """The namespaces among `existing` this caller may read, its own first."""
        allowed = {ns for ns in existing if self.can_read(ns)}
        return sorted(allowed, key=lambda ns: (ns != self.own, ns != SHARED_NAMESPACE, ns))

    @property
    def conversations(self) -> str | None:
        """The namespace this caller's conversations are kept under (S5); None: not kept."""
        return self.own

    @property
    def reads_all_conversations(self) -> bool:
        """Whether this caller may read every caller's kept conversations (the owner, from
        `webagents sessions`, as it reads every namespace's notes); it changes only its own."""
        return self.reads_all

    def lookup_order(self) -> list[str]:
        """Where a bare key is looked up (M4): the caller's own namespace, then shared."""
        return [ns for ns in (self.own, SHARED_NAMESPACE) if ns is not None]


def rights_of(caller: Caller) -> Rights:
    if caller.is_owner:
        return Rights(
            own=OWNER_NAMESPACE,
            reads_all=True,
            writable=frozenset({OWNER_NAMESPACE, SHARED_NAMESPACE}),
            readable_named=frozenset({OWNER_NAMESPACE, SHARED_NAMESPACE}),
        )
    own = caller.namespace
    if own is None:
        return Rights(None, False, frozenset(), frozenset({SHARED_NAMESPACE}))
    return Rights(own, False, frozenset({own}), frozenset({own, SHARED_NAMESPACE}))


def synced(namespace: str) -> bool:
    """Whether the agent's portal sync (P7) carries a namespace, pushed and pulled: `owner`,
    `shared` and each caller's own (`caller:<identity>`), each only to and from its own folder
    and its own namespace in the portal. What a conversation sees of the synced notes is still
    its `Rights` (its own namespace and shared; the owner every one), as for the files."""
    return namespace in (OWNER_NAMESPACE, SHARED_NAMESPACE) or (
        namespace.startswith("caller:") and len(namespace) > len("caller:")
    )


def offered_agent_credentials(caller: Caller, *, to_callers: bool) -> bool:
    """Whether tools that act with the agent's own credentials (an MCP server's, the `mcp`
    skill) are offered to `caller`: always to the owner; to a verified caller with a
    namespace of its own only where the owner said so (`to_callers`, `callers: true`);
    never to an anonymous caller, whatever was said."""
    if caller.is_owner:
        return True
    return to_callers and rights_of(caller).own is not None
