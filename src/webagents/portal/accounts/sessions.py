"""The ways into an account that its owner can see and end (issue 21): browser sessions and
command-line sign-ins (tokens from /cli/auth, the device grant, or an API key exchanged),
when and from where each began and was last used; ending one, all of them ("sign out
everywhere"), and the password change, which ends every other one. An ended command-line
sign-in is refused at its next request (tokens.verify checks every token is live)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from ..errors import NotFound, Unauthorized
from ..scope import AccountScope
from ..settings import PortalSettings
from ..tokens.credentials import digest
from . import limits
from .password_policy import check_password
from .passwords import hash_password, verify_password
from .repository import PreAuth, SignIns

KINDS = {
    "cli": "webagents login (browser)",
    "device": "webagents login --device",
    "key": "webagents login --token (API key)",
}


@dataclass(frozen=True)
class WayIn:
    """One row of the sessions page; `kind` is `browser` or a command line's kind."""

    kind: str
    id: str
    what: str
    began: datetime | None
    address: str | None
    last_used: datetime | None
    current: bool = False


def ways_in(db: Session, scope: AccountScope, browser_token: str | None) -> list[WayIn]:
    now = datetime.now(UTC)
    mine = digest(browser_token) if browser_token else None
    sign_ins = SignIns(db, scope)
    browsers = [
        WayIn(
            "browser",
            str(row.id),
            "browser",
            row.created_at,
            row.address,
            row.last_used_at,
            current=row.token_hash == mine,
        )
        for row in sign_ins.browsers(now)
    ]
    command_lines = [
        WayIn(
            "cli",
            row.jti,
            KINDS.get(row.kind or "", "command line"),
            row.issued_at,
            row.address,
            row.last_used_at,
        )
        for row in sign_ins.command_lines(now)
    ]
    return browsers + command_lines


def end_one(db: Session, scope: AccountScope, kind: str, way_id: str) -> None:
    """End one of the account's sessions or sign-ins; another account's, or none, is a 404."""
    sign_ins = SignIns(db, scope)
    ended = False
    if kind == "browser":
        try:
            ended = sign_ins.end_browser(uuid.UUID(way_id))
        except ValueError:
            ended = False
    elif kind == "cli":
        ended = sign_ins.end_command_line(way_id, datetime.now(UTC))
    if not ended:
        raise NotFound("you have no such session: see yours on the sessions page")


def end_everywhere(db: Session, scope: AccountScope) -> None:
    """Every browser session, this one included, and every command-line sign-in."""
    SignIns(db, scope).end_all(datetime.now(UTC))


def change_password(
    db: Session,
    settings: PortalSettings,
    scope: AccountScope,
    old: str,
    new: str,
    address: str,
    browser_token: str | None,
) -> None:
    """The old password first (counted as a sign-in's, so a session left open cannot be
    used to guess it); the new one by the policy; every other session and sign-in ends."""
    directory = PreAuth(db)
    directory.hold_sign_ins_of(scope.username)
    now = datetime.now(UTC)
    limits.check_allowed(directory, settings, scope.username, address, now)
    sign_ins = SignIns(db, scope)
    if not verify_password(sign_ins.user().password_hash, old):
        limits.record_failure(directory, settings, scope.username, address, now)
        raise Unauthorized(
            "the current password is wrong: type the one you sign in with now",
            code="wrong_password",
        )
    new = check_password(new, scope.username)
    sign_ins.set_password_hash(hash_password(new))
    mine = directory.browser_session(digest(browser_token), now) if browser_token else None
    sign_ins.end_all(now, keep_browser=mine[1].id if mine is not None else None)


def set_password(db: Session, scope: AccountScope, new: str) -> None:
    """The administrator's `webagents portal passwd`: no old password, every session ends."""
    new = check_password(new, scope.username)
    sign_ins = SignIns(db, scope)
    sign_ins.set_password_hash(hash_password(new))
    sign_ins.end_all(datetime.now(UTC))
