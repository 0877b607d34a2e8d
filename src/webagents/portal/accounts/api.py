"""Accounts over the API: `GET /api/users/me` (SPEC P3), for a bearer API key."""

from __future__ import annotations

from fastapi import APIRouter

from ...portal_wire.accounts import MeOut, UserOut
from ..db.requests import Db
from .dependencies import ApiCaller
from .repository import SignIns

router = APIRouter(prefix="/api")


@router.get("/users/me")
def me(scope: ApiCaller, db: Db) -> MeOut:
    user = SignIns(db, scope).user()
    return MeOut(user=UserOut.model_validate(user, from_attributes=True))
