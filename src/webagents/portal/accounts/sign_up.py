"""Sign-up on the portal's page, as the administrator chose (`portal serve --sign-up`):
`open` to anyone, `invite` to whoever holds an invitation (`webagents portal invite`), or
`closed`. Accounts made from one address are limited per window, counted in the database
so that every portal process shares the count."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from ..errors import Forbidden, TooManyRequests
from ..settings import PortalSettings
from ..tokens.credentials import digest
from .repository import PreAuth
from .service import SignedIn, add_user, new_browser_session

INVITE_PREFIX = "inv_"
CLOSED = (
    "this portal does not take sign-ups: ask its administrator for an account (they add one "
    "with webagents portal adduser)"
)
INVITE_NEEDED = (
    "this portal takes sign-ups by invitation: enter the code its administrator gave you "
    "(they make one with webagents portal invite)"
)
BAD_INVITE = (
    "this invitation code is unknown, used or expired: ask the portal's administrator for a "
    "new one (webagents portal invite)"
)


def new_invite(db: Session, lifetime: timedelta) -> tuple[str, datetime]:
    """A new invitation: its code (shown this once) and when it expires."""
    code = INVITE_PREFIX + secrets.token_urlsafe(18)
    now = datetime.now(UTC)
    invite = PreAuth(db).add_invite(digest(code.strip()), now, now + lifetime)
    return code, invite.expires_at


def sign_up(
    db: Session,
    settings: PortalSettings,
    username: str,
    password: str,
    address: str,
    invite: str = "",
) -> SignedIn:
    if settings.sign_up == "closed":
        raise Forbidden(CLOSED, code="sign_up_closed")
    if settings.sign_up == "invite" and not invite.strip():
        raise Forbidden(INVITE_NEEDED, code="invite_required")
    directory = PreAuth(db)
    now = datetime.now(UTC)
    code = digest(invite.strip())
    if settings.sign_up == "invite" and not directory.invite_usable(code, now):
        raise Forbidden(BAD_INVITE, code="bad_invite")  # before anything about the name
    directory.hold_sign_ups_from(address)  # until the request's transaction ends
    since = now - settings.sign_up_window
    if directory.sign_ups_since(since, address) >= settings.sign_ups_per_address:
        hours = settings.sign_up_window.total_seconds() / 3600
        window = f"{hours:g} hour" + ("" if hours == 1 else "s")
        raise TooManyRequests(
            f"{settings.sign_ups_per_address} accounts were made from your address in the "
            f"last {window}: try again later, or ask the portal's administrator for an account",
            code="sign_up_limit",
        )
    # One step: an account refused (a name taken) leaves the invitation unused, and an
    # invitation refused leaves no account.
    with db.begin_nested():
        scope = add_user(db, username, password)
        if settings.sign_up == "invite" and not directory.take_invite(code, scope.user_id, now):
            raise Forbidden(BAD_INVITE, code="bad_invite")  # taken meanwhile by another
        directory.add_sign_up(address, now, forget_before=since)
    return new_browser_session(db, settings, scope, address)
