"""The loaded signing keys (P2, P12's assertion): a key's PEM is loaded once per process and
kid, and the signing key is still the one the table names, a rotated-in key included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from sqlalchemy.orm import Session

from webagents.portal.connect import assertion
from webagents.portal.settings import PortalSettings
from webagents.portal.tokens import keys as signing
from webagents.portal.tokens import service as tokens

from .conftest import make_account

ISSUER = "http://testserver"


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The PEMs loaded, into a fresh cache (the process-wide one may hold the test's kids)."""
    loaded: list[bytes] = []
    real = serialization.load_pem_private_key

    def counting(data: bytes, password: bytes | None) -> Any:
        loaded.append(data)
        return real(data, password)

    monkeypatch.setattr(serialization, "load_pem_private_key", counting)
    monkeypatch.setattr(signing, "LOADED", signing._LoadedKeys(signing.LOADED_KEYS_KEPT))
    return loaded


def test_p2_p12_a_signing_key_is_loaded_once_and_a_rotated_in_key_signs(
    db: Session, settings: PortalSettings, loads: list[bytes]
) -> None:
    scope = make_account(db)
    first = tokens.issue(
        db, settings, issuer=ISSUER, subject=scope.user_id, username=scope.username
    )
    second = tokens.issue(
        db, settings, issuer=ISSUER, subject=scope.user_id, username=scope.username
    )
    relayed = assertion.sign(
        db,
        issuer=ISSUER,
        agent_id=scope.user_id,
        user_id=scope.user_id,
        username="alice",
        tier="owner",
    )
    old_kid = jwt.get_unverified_header(first.token)["kid"]
    assert [jwt.get_unverified_header(t)["kid"] for t in (second.token, relayed)] == [
        old_kid,
        old_kid,
    ]
    assert len(loads) == 1
    assert signing.LOADED.kids() == [old_kid]

    new = tokens.rotate(db, settings, timedelta(0))
    third = tokens.issue(
        db, settings, issuer=ISSUER, subject=scope.user_id, username=scope.username
    )
    assert jwt.get_unverified_header(third.token)["kid"] == new.kid != old_kid
    assert len(loads) == 2
    assert signing.LOADED.kids() == [old_kid, new.kid]
    for token in (first.token, second.token, third.token):
        claims = tokens.verify(db, settings, token, issuer=ISSUER, audience=tokens.PORTAL_AUDIENCE)
        assert claims["sub"] == str(scope.user_id)


def test_p2_loaded_keys_are_bounded_the_least_recently_used_dropped(loads: list[bytes]) -> None:
    now = datetime.now(UTC)
    made = [signing.new_signing_key(now, activates_at=now) for _ in range(3)]
    kept = signing._LoadedKeys(2)
    kept.of(made[0])
    kept.of(made[1])
    kept.of(made[0])  # used again: now the newest
    kept.of(made[2])
    assert kept.kids() == [made[0].kid, made[2].kid]
    assert len(loads) == 3
