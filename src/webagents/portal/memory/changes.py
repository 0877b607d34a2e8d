"""Who hears that an agent's memory changed, and when: only once the change is committed.

The service records each change's agent and cursor on the session that made it (`changed`);
the sessions' maker, where a listener was set (`listen`: the app's, for Portal Connect's
memory notices), hands the latest cursor of each agent to it after the commit, and forgets
them at a rollback. A listener is told nothing that a reader could not see yet, so an agent
told to pull finds the change; and the service stays free of the relay."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

log = logging.getLogger("webagents.portal.memory")

Listener = Callable[[uuid.UUID, int], None]
"""(agent id, its latest cursor): called in the thread that committed; must not block."""

_PENDING = "webagents.memory_changed"


def changed(info: dict[Any, Any], agent_id: uuid.UUID, cursor: int) -> None:
    """A change of the agent's memory at `cursor`, in the transaction whose session holds
    `info`: said to the listener once that transaction commits."""
    pending: dict[uuid.UUID, int] = info.setdefault(_PENDING, {})
    pending[agent_id] = max(cursor, pending.get(agent_id, 0))


def listen(sessions: sessionmaker[Session], listener: Listener) -> Callable[[], None]:
    """Tell `listener` of the changes committed by the sessions `sessions` makes; returns
    what stops it."""

    def committed(session: Session) -> None:
        pending: dict[uuid.UUID, int] = session.info.pop(_PENDING, {})
        for agent_id, cursor in pending.items():
            try:
                listener(agent_id, cursor)
            except Exception:  # the change is kept all the same: a notice is a shortcut
                log.exception("memory: telling of a change failed")

    def rolled_back(session: Session) -> None:
        session.info.pop(_PENDING, None)

    event.listen(sessions, "after_commit", committed)
    event.listen(sessions, "after_rollback", rolled_back)

    def stop() -> None:
        event.remove(sessions, "after_commit", committed)
        event.remove(sessions, "after_rollback", rolled_back)

    return stop
