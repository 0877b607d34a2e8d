"""Retention (P6): how many days each namespace of an agent's memory keeps an entry that is
not updated, and the sweeper that removes the expired ones.

A rule names one namespace (`owner`, `shared`, `caller:...`) or every caller's namespace at
once (`caller:*`); a caller's own rule comes before `caller:*`. The sweeper removes an
expired entry through the store's own delete, so the removal is kept as a version and is a
`delete` line of sync: the agent's file goes too. Versions older than the period go as well
(SPEC P6: kept "until the namespace's retention removes it"); the removal's own version is
new, so what was removed can still be restored for one more period.

Safe in any number of processes at once: a sweep of an agent first takes the agent's
change-feed row lock, the lock every writer of that agent takes (repository.next_cursor), so
sweepers and writers of one agent take turns, and what a sweep finds expired is still so when
it removes it (each removal also carries the content hash it found: a stale one changes
nothing). SQLite's BEGIN IMMEDIATE serializes every writer already.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import ColumnElement, and_, false, or_
from sqlalchemy.orm import InstrumentedAttribute, Session, sessionmaker

from ..db.tables import MemoryEntry, MemoryVersion
from ..errors import BadInput, Conflict
from ..scope import SystemScope
from . import service
from .across_agents import AcrossAgents
from .repository import MemoryStore
from .schemas import check_namespace as store_namespace

ALL_CALLERS = "caller:*"
BY_RETENTION = "retention"
"""`by` of the versions the sweeper's removals leave."""
MAX_DAYS = 36500
SWEEP_SECONDS_ENV = "WEBAGENTS_PORTAL_RETENTION_SWEEP_SECONDS"
DEFAULT_SWEEP_SECONDS = 600.0

log = logging.getLogger("webagents.portal.memory")


@dataclass(frozen=True)
class Rule:
    namespace: str
    days: int


def check_namespace(namespace: str) -> str:
    """A namespace the store keeps (its own rule), or `caller:*`."""
    if namespace == ALL_CALLERS:
        return namespace
    try:
        return store_namespace(namespace)
    except BadInput:
        raise BadInput(
            f"{namespace!r} is not a namespace of an agent's memory: choose owner, shared, "
            f"caller:<identity>, or {ALL_CALLERS} for every caller's namespace",
            code="invalid_namespace",
        ) from None


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


def rules_of(store: MemoryStore) -> list[Rule]:
    """The agent's rules, `caller:*` first, then by namespace."""
    rules = [Rule(namespace, days) for namespace, days in store.retention_rules()]
    return sorted(rules, key=lambda rule: (rule.namespace != ALL_CALLERS, rule.namespace))


def set_rule(store: MemoryStore, namespace: str, days: str | int | None) -> None:
    """Set (or with no days, remove) the rule of one namespace, or of `caller:*`."""
    store.set_retention(check_namespace(namespace), check_days(days), datetime.now(UTC))


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


@dataclass(frozen=True)
class Swept:
    """What one sweep removed: entries as (namespace, key), and how many old versions."""

    entries: list[tuple[str, str]]
    versions: int


def _expired(
    rules: list[Rule],
    now: datetime,
    namespace: InstrumentedAttribute[str],
    moment: InstrumentedAttribute[datetime],
) -> ColumnElement[bool]:
    """Rows of an expired namespace older than its period, as one SQL condition."""
    exact = [rule for rule in rules if rule.namespace != ALL_CALLERS]
    conditions = [
        and_(namespace == rule.namespace, moment < cutoff(rule.days, now)) for rule in exact
    ]
    for rule in rules:
        if rule.namespace == ALL_CALLERS:
            own = [r.namespace for r in exact if r.namespace.startswith("caller:")]
            conditions.append(
                and_(
                    namespace.startswith("caller:"),
                    namespace.not_in(own) if own else namespace.is_not(None),
                    moment < cutoff(rule.days, now),
                )
            )
    return or_(*conditions) if conditions else false()


SWEEPER = SystemScope("retention sweeper")


def sweep_agent(db: Session, agent_id: uuid.UUID, now: datetime) -> Swept:
    """Remove what the agent's rules say has expired at `now` (flushed, not committed)."""
    store = MemoryStore.for_system(db, SWEEPER, agent_id)
    rules = rules_of(store) if store is not None else []
    if store is None or not rules:
        return Swept([], 0)
    # Every writer of this agent takes this row's lock first: from here on nothing changes
    # under the sweep (a second sweeper waits here, then finds nothing left to do).
    store.hold_feed()
    found = store.live_matching(_expired(rules, now, MemoryEntry.namespace, MemoryEntry.updated_at))
    removed: list[tuple[str, str]] = []
    for namespace, key, digest in found:
        try:
            with db.begin_nested():
                gone = service.delete(
                    store, namespace, key, content_sha256=digest, at=now, by=BY_RETENTION
                )
        except Conflict:
            continue  # changed meanwhile: not expired any more
        if gone:
            removed.append((namespace, key))
    old = store.drop_versions(_expired(rules, now, MemoryVersion.namespace, MemoryVersion.at))
    store.flush()
    return Swept(removed, old)


def sweep(db: Session, now: datetime) -> dict[uuid.UUID, Swept]:
    """Every agent's sweep in the caller's transaction (flushed, not committed)."""
    agent_ids = AcrossAgents(db, SWEEPER).agents_with_rules()
    return {agent_id: sweep_agent(db, agent_id, now) for agent_id in agent_ids}


def sweep_each(sessions: sessionmaker[Session], now: datetime) -> int:
    """Every agent's sweep, each in a short transaction of its own (committed): what the
    background sweeper runs. How many entries it removed."""
    with sessions() as db:
        agent_ids = AcrossAgents(db, SWEEPER).agents_with_rules()
    removed = 0
    for agent_id in agent_ids:
        with sessions() as db, db.begin():
            removed += len(sweep_agent(db, agent_id, now).entries)
    return removed


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
        sweep: Callable[[sessionmaker[Session], datetime], int] = sweep_each,
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
