"""How much the memory store keeps (issue 21): per agent and per user, the live entries and
their content's bytes, and the bytes of the versions kept; per entry, the versions kept.

A write that would go over a quota is refused with 429 and a code that names the quota
(`agent_entries_quota`, `agent_bytes_quota`, `user_entries_quota`, `user_bytes_quota`,
`agent_version_bytes_quota`, `user_version_bytes_quota`), and changes nothing. 429, not 413:
the write itself is acceptable (a note over the size of one note is the 413 `too_large`), the
store is full for now, and what fixes it is forgetting notes (or, for the versions, the
owner's retention), after which the same write succeeds; our sync keeps a line refused with
429 waiting in its outbox, in order, where a 413 would set it aside for good. A forget is
never refused, nor an overwrite no larger by the entries and bytes quotas, so an agent over a
quota lowered by the administrator can always shrink.

Versions beyond `versions_per_entry` are dropped oldest first at each change of the entry;
the newest, which holds the entry's current text, is never dropped. Every other version is
kept until then, or until the namespace's retention removes it (P6), a forgotten entry's
included: the version bytes bound what overwriting notes, or writing notes and forgetting
them, would otherwise grow without end, as the live bytes see neither. Every put keeps a
version, so every put is checked against them (an overwrite no larger included); a forget is
not, though its version keeps the forgotten text (to restore it). Forgetting frees no
version bytes: what frees them is the owner's retention period of the namespace (its
versions older than the period go), or the administrator's smaller `--memory-versions`.

The counts live on the agent's feed row (`memory_feeds.entries`, `.bytes`, `.version_bytes`),
kept by every change under the row lock that every writer of the agent takes, so an agent's
quota is exact. A user's total is the sum over their agents' rows, read without their locks:
writers of two agents of one user at the same instant may pass it by one write each.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session
from starlette.requests import Request

from ...openai_wire import error_body
from ...server.api_errors import error_type
from ..errors import PortalError
from ..settings import MB, OPTIONS, MemoryQuotas


class QuotaExceeded(PortalError):
    """A write over a quota; `option` is the `portal serve` option that sets it."""

    status = 429
    code = "quota_exceeded"

    def __init__(self, message: str, *, code: str, option: str) -> None:
        super().__init__(message, code=code)
        self.option = option

    def answer(self, db: Session) -> JSONResponse:
        """The API's answer, in the endpoint (the portal's error handler has no `param` to
        give): the request's transaction rolled back first, so nothing of the refused write
        is kept (a push's earlier lines included), then OpenAI's error shape with the
        quota's option as its `param`.

        No `Retry-After`: a quota is a count, not a rate, and waiting does not free it (only
        forgetting notes, or a larger option, does); a client that retried after the pause
        would be refused the same. Our sync keeps the line waiting and pushes it again later.
        """
        db.rollback()
        body = error_body(self.message, error_type(self.status), self.code)
        body["error"]["param"] = self.option
        return JSONResponse(body, status_code=self.status)


def quotas_of(request: Request) -> MemoryQuotas:
    """The bounds the portal was started with (`PortalSettings.memory_quotas`)."""
    quotas: MemoryQuotas = request.app.state.settings.memory_quotas
    return quotas


@dataclass(frozen=True)
class Usage:
    entries: int
    bytes: int
    version_bytes: int


def _size(count: int) -> str:
    return f"{count:,} bytes" if count < MB else f"{count / MB:,.1f} MB"


_FREE = (
    "forget notes the agent no longer needs (memory_forget, or the owner's memory "
    "pages), or ask the portal's administrator to raise"
)
_KEPT = (
    "the owner can set a retention period for the namespace on the agent's memory page "
    "(versions and forgotten notes older than it go), or ask the portal's administrator "
    "to raise"
)


@dataclass(frozen=True)
class _Bound:
    """One quota as a write meets it: `name` is its MemoryQuotas field (its option in
    OPTIONS, its code `<name>_quota`); `over` says, for the message, what going over is, and
    `free` what frees room."""

    name: str
    used: int
    added: int
    limit: int
    over: str
    free: str = _FREE


def check_write(
    quotas: MemoryQuotas, agent: Usage, user: Usage, *, entries: int, size: int, version: int
) -> None:
    """Refuse a write that adds `entries` (0 or 1), `size` bytes (may be negative) and a
    version of `version` bytes when it would bring the agent's or the user's store over a
    quota."""
    bounds = (
        _Bound(
            "agent_entries",
            agent.entries,
            entries,
            quotas.agent_entries,
            f"this agent keeps {agent.entries:,} notes in the portal, the most it may "
            f"({quotas.agent_entries:,})",
        ),
        _Bound(
            "agent_bytes",
            agent.bytes,
            size,
            quotas.agent_bytes,
            f"this note would bring this agent's notes in the portal to "
            f"{_size(agent.bytes + size)}, over the {_size(quotas.agent_bytes)} it may keep",
        ),
        _Bound(
            "user_entries",
            user.entries,
            entries,
            quotas.user_entries,
            f"the agents of this agent's owner keep {user.entries:,} notes in the portal, the "
            f"most one user's agents may ({quotas.user_entries:,})",
        ),
        _Bound(
            "user_bytes",
            user.bytes,
            size,
            quotas.user_bytes,
            f"this note would bring the notes of this agent's owner's agents in the portal to "
            f"{_size(user.bytes + size)}, over the {_size(quotas.user_bytes)} one user's "
            f"agents may keep",
        ),
        _Bound(
            "agent_version_bytes",
            agent.version_bytes,
            version,
            quotas.agent_version_bytes,
            f"this note's version would bring the versions this agent's notes keep in the "
            f"portal (forgotten notes' included) to {_size(agent.version_bytes + version)}, "
            f"over the {_size(quotas.agent_version_bytes)} it may keep",
            _KEPT,
        ),
        _Bound(
            "user_version_bytes",
            user.version_bytes,
            version,
            quotas.user_version_bytes,
            f"this note's version would bring the versions that the notes of this agent's "
            f"owner's agents keep in the portal (forgotten notes' included) to "
            f"{_size(user.version_bytes + version)}, over the "
            f"{_size(quotas.user_version_bytes)} one user's agents may keep",
            _KEPT,
        ),
    )
    for bound in bounds:
        if bound.added > 0 and bound.used + bound.added > bound.limit:
            option = OPTIONS[bound.name]
            raise QuotaExceeded(
                f"{bound.over}; nothing was stored: {bound.free} {option}",
                code=f"{bound.name}_quota",
                option=option,
            )
