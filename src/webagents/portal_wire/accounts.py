"""Who is signed in, the tokens the portal gives a command line, and an agent's access
(SPEC P3, P12)."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel


class UserOut(BaseModel):
    id: uuid.UUID
    username: str
    created_at: datetime


class MeOut(BaseModel):
    """`GET /api/users/me` (SPEC P3): `{user: {id, username, ...}}`, as this portal answers."""

    user: UserOut


class SignedInUser(BaseModel):
    """What SPEC P3 promises of the user `GET /api/users/me` names, all a client may count
    on: any portal of the platform answers an id and a username; the rest is its own."""

    id: str
    username: str


class SignedIn(BaseModel):
    """`GET /api/users/me` as a client reads it, from this portal or another of the
    platform's."""

    user: SignedInUser


class CliToken(BaseModel):
    """`POST /api/auth/cli/token`: an access token for the API key presented, and whose."""

    access_token: str
    username: str
    user_id: str


class Revoked(BaseModel):
    """`POST /api/auth/cli/logout`: whether the token was revoked now."""

    revoked: bool


class AgentAccess(BaseModel):
    """`GET /api/agents/{id}/access`: whether the owner allows other portal users to call the
    agent, as it stands now."""

    allowOthers: bool
