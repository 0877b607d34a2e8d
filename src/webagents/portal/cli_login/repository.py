"""All SQL of the command line's sign-in: pending device authorizations."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import delete, select, update

from ..db.tables import DeviceCode, User
from ..scope import PreAuthLookup


class DeviceCodes(PreAuthLookup):
    """Device codes are looked up by what their holder presents (the device its code, the
    person the short user code), before any account is known: no scope."""

    def add(self, code: DeviceCode) -> DeviceCode:
        self._session.add(code)
        self._session.flush()
        return code

    def by_device_code(self, device_code_hash: str) -> DeviceCode | None:
        return self._session.scalars(
            select(DeviceCode).where(DeviceCode.device_code_hash == device_code_hash)
        ).one_or_none()

    def by_user_code(self, user_code: str) -> DeviceCode | None:
        return self._session.scalars(
            select(DeviceCode).where(DeviceCode.user_code == user_code)
        ).one_or_none()

    def consume(self, code_id: uuid.UUID, now: datetime) -> bool:
        """Mark the code used; False when another poll used it first (one token per code)."""
        done = self._session.execute(
            update(DeviceCode)
            .where(DeviceCode.id == code_id, DeviceCode.consumed_at.is_(None))
            .values(consumed_at=now)
        )
        return bool(getattr(done, "rowcount", 0) == 1)

    def approver(self, code: DeviceCode) -> User:
        """The account that approved the code (the caller checked that one did)."""
        assert code.user_id is not None
        return self._session.get_one(User, code.user_id)

    def forget_expired(self, now: datetime) -> None:
        self._session.execute(delete(DeviceCode).where(DeviceCode.expires_at <= now))
