"""The rules of the command line's sign-in, shared by its pages and its API."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from sqlalchemy.orm import Session

from ..db.tables import DeviceCode
from ..errors import BadInput, PortalError
from ..scope import AccountScope
from ..settings import PortalSettings
from ..tokens import service as tokens
from ..tokens.credentials import digest
from .repository import DeviceCodes

_STATE = re.compile(r"^[A-Za-z0-9._~-]{8,256}$")
DEVICE_CODE_LIFETIME = timedelta(minutes=10)
DEVICE_POLL_SECONDS = 5
# RFC 8628 6.1: no vowels (no words), no look-alikes; 8 characters shown as XXXX-XXXX.
_USER_CODE_LETTERS = "BCDFGHJKLMNPQRSTVWXZ"


class DeviceGrantError(PortalError):
    """An answer of the device token endpoint other than a token, as RFC 8628 names it:
    authorization_pending, slow_down, access_denied, expired_token, invalid_grant."""

    status = 400


def check_callback(port: str, state: str) -> tuple[int, str]:
    """The CLI's callback port and its `state`, or a 400 that says what is wrong."""
    try:
        number = int(port)
    except ValueError:
        number = 0
    if not 1024 <= number <= 65535:
        raise BadInput("the sign-in link has no valid port: run webagents login again")
    if not _STATE.fullmatch(state):
        raise BadInput("the sign-in link has no valid state: run webagents login again")
    return number, state


def callback_url(port: int, **params: str) -> str:
    return f"http://127.0.0.1:{port}/callback?{urlencode(params)}"


def approve_cli(
    db: Session,
    settings: PortalSettings,
    scope: AccountScope,
    issuer: str,
    port: int,
    state: str,
    address: str,
) -> str:
    issued = tokens.issue(
        db,
        settings,
        issuer=issuer,
        subject=scope.user_id,
        username=scope.username,
        sign_in=("cli", address),
    )
    return callback_url(port, token=issued.token, username=scope.username, state=state)


def start_device(db: Session, issuer: str) -> dict[str, Any]:
    now = datetime.now(UTC)
    codes = DeviceCodes(db)
    codes.forget_expired(now)
    device_code = secrets.token_urlsafe(32)
    letters = "".join(secrets.choice(_USER_CODE_LETTERS) for _ in range(8))
    user_code = f"{letters[:4]}-{letters[4:]}"
    codes.add(
        DeviceCode(
            device_code_hash=digest(device_code),
            user_code=user_code,
            created_at=now,
            expires_at=now + DEVICE_CODE_LIFETIME,
        )
    )
    return {
        "device_code": device_code,
        "user_code": user_code,
        "verification_uri": f"{issuer}/device",
        "verification_uri_complete": f"{issuer}/device?{urlencode({'user_code': user_code})}",
        "expires_in": int(DEVICE_CODE_LIFETIME.total_seconds()),
        "interval": DEVICE_POLL_SECONDS,
    }


def normalize_user_code(given: str) -> str:
    letters = "".join(ch for ch in given.upper() if ch.isalnum())
    return f"{letters[:4]}-{letters[4:]}"


def decide_device(db: Session, scope: AccountScope, user_code: str, approve: bool) -> None:
    code = DeviceCodes(db).by_user_code(normalize_user_code(user_code))
    now = datetime.now(UTC)
    if code is None or code.expires_at <= now or code.consumed_at is not None:
        raise BadInput(
            "no device is waiting with this code (it may have expired): check the code, or "
            "run webagents login --device again"
        )
    if code.user_id is not None or code.denied:
        raise BadInput("this code was answered already: run webagents login --device again")
    if approve:
        code.user_id = scope.user_id
    else:
        code.denied = True
    db.flush()


def poll_device(
    db: Session,
    settings: PortalSettings,
    issuer: str,
    grant_type: str,
    device_code: str,
    address: str,
) -> dict[str, Any]:
    if grant_type != "urn:ietf:params:oauth:grant-type:device_code":
        raise DeviceGrantError(
            "grant_type must be urn:ietf:params:oauth:grant-type:device_code",
            code="unsupported_grant_type",
        )
    code = DeviceCodes(db).by_device_code(digest(device_code)) if device_code else None
    now = datetime.now(UTC)
    if code is None:
        raise DeviceGrantError("unknown device code", code="invalid_grant")
    if code.consumed_at is not None:
        raise DeviceGrantError("this device code was used already", code="invalid_grant")
    if code.expires_at <= now:
        raise DeviceGrantError("the device code expired", code="expired_token")
    if code.denied:
        raise DeviceGrantError("the sign-in was denied", code="access_denied")
    if code.user_id is None:
        polled_before = code.last_polled_at
        code.last_polled_at = now
        db.flush()
        if polled_before and now - polled_before < timedelta(seconds=DEVICE_POLL_SECONDS):
            raise DeviceGrantError("poll less often", code="slow_down")
        raise DeviceGrantError("not approved yet", code="authorization_pending")
    user = DeviceCodes(db).approver(code)
    if not DeviceCodes(db).consume(code.id, now):
        raise DeviceGrantError("this device code was used already", code="invalid_grant")
    issued = tokens.issue(
        db,
        settings,
        issuer=issuer,
        subject=user.id,
        username=user.username,
        sign_in=("device", address),  # where the device is, which polled
    )
    return {
        "access_token": issued.token,
        "token_type": "Bearer",
        "expires_in": int(settings.token_lifetime.total_seconds()),
        "username": user.username,
        "user_id": str(user.id),
    }
