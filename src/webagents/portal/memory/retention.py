"""Retention (P6): how many days each namespace of an agent's memory keeps an entry that is
not updated, and the sweeper that removes the expired ones.

A rule names one namespace (`owner`, `shared`, `caller:...`) or every caller's namespace at
once (`caller:*`); a caller's own rule comes before `caller:*`. The sweeper removes an
expired entry through the store's own delete, so the removal is kept as a version and is a
`delete` line of sync: the agent's file goes too. It is safe to run in any number of
processes at once: each entry is removed under its row lock (skipped when another sweeper
holds it) and only if it is still unchanged since it was found expired.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from ...caller import OWNER_NAMESPACE, SHARED_NAMESPACE
from ..db.tables import MemoryRetention
from ..errors import BadInput

ALL_CALLERS = "caller:*"
MAX_DAYS = 36500
SWEEP_SECONDS_ENV = "WEBAGENTS_PORTAL_RETENTION_SWEEP_SECONDS"
DEFAULT_SWEEP_SECONDS = 600.0

log = logging.getLogger("webagents.portal.memory")


@dataclass(frozen=True)
class Rule:
    namespace: str
    days: int


def check_namespace(namespace: str) -> str:
    if namespace in (OWNER_NAMESPACE, SHARED_NAMESPACE, ALL_CALLERS) or (
        namespace.startswith("caller:") and len(namespace) > len("caller:")
    ):
        return namespace
    raise BadInput(
        f"{namespace!r} is not a namespace of an agent's memory: choose owner, shared, "
        f"caller:<identity>, or {ALL_CALLERS} for every caller's namespace",
        code="invalid_namespace",
    )


def check_days(days: str | int | None) -> int | None:
    """Whole days from 1 to 36500; None (or an empty form field): keep forever."""
    if days is None or (isinstance(days, str) and not days.strip()):
        return None
    try:
        value = int(days.strip()) if isinstance(days, str) else int(days)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_DAYS:
        raise BadInput(
            f"retention is a whole number of days from 1 to {MAX_DAYS} (or empty to keep "
            f"entries until they are forgotten), not {days!r}",
            code="invalid_retention",
        )
    return value


def rules_of(db: Session, agent_id: uuid.UUID) -> list[Rule]:
    """The agent's rules, `caller:*` first, then by namespace. The agent is the caller's to
    have checked (its owner's scope)."""
    rows = db.scalars(
        select(MemoryRetention)
        .where(MemoryRetention.agent_id == agent_id)
        .order_by(MemoryRetention.namespace)
    )
    rules = [Rule(row.namespace, row.days) for row in rows]
    return sorted(rules, key=lambda rule: (rule.namespace != ALL_CALLERS, rule.namespace))


def set_rule(db: Session, agent_id: uuid.UUID, namespace: str, days: str | int | None) -> None:
    """Set (or with no days, remove) the rule of one namespace, or of `caller:*`."""
    namespace = check_namespace(namespace)
    value = check_days(days)
    row = db.scalars(
        select(MemoryRetention)
        .where(MemoryRetention.agent_id == agent_id, MemoryRetention.namespace == namespace)
        .with_for_update()
    ).one_or_none()
    if value is None:
        if row is not None:
            db.delete(row)
    elif row is None:
        db.add(MemoryRetention(agent_id=agent_id, namespace=namespace, days=value))
    else:
        row.days = value
        row.updated_at = datetime.now(UTC)
    db.flush()


def days_for(rules: list[Rule], namespace: str) -> int | None:
    """The days a namespace keeps entries under these rules; None: forever."""
    by_namespace = {rule.namespace: rule.days for rule in rules}
    if namespace in by_namespace:
        return by_namespace[namespace]
    if namespace.startswith("caller:"):
        return by_namespace.get(ALL_CALLERS)
    return None


def cutoff(days: int, now: datetime) -> datetime:
    return now - timedelta(days=days)


def sweep_seconds() -> float:
    raw = os.environ.get(SWEEP_SECONDS_ENV, "").strip()
    try:
        value = float(raw) if raw else DEFAULT_SWEEP_SECONDS
    except ValueError:
        value = DEFAULT_SWEEP_SECONDS
    return max(value, 0.05)


class Sweeper:
    """The background thread of `webagents portal serve` that sweeps every `every` seconds,
    each agent in a short transaction of its own."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        sweep: Callable[[sessionmaker[Session], datetime], int],
        *,
        every: float | None = None,
    ) -> None:
        self._sessions = sessions
        self._sweep = sweep
        self.every = every if every is not None else sweep_seconds()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-retention", daemon=True)

    def start(self) -> Sweeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                removed = self._sweep(self._sessions, datetime.now(UTC))
                if removed:
                    log.info("memory retention: removed %d expired entries", removed)
            except Exception:  # the next round tries again; the server keeps serving
                log.exception("memory retention: the sweep failed (it runs again)")
            self._stop.wait(self.every)
