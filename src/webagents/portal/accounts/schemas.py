"""What accounts take in and give out: usernames and passwords checked, and the JSON shapes."""

from __future__ import annotations

import re
import uuid
from datetime import datetime

from pydantic import BaseModel

from ..errors import BadInput

USERNAME_RULE = "3-32 characters of a-z 0-9 _ -, starting with a letter or digit"
_USERNAME = re.compile(r"^[a-z0-9][a-z0-9_-]{2,31}$")
KEY_NAME_MAX = 100


def normalize_username(given: str) -> str:
    """Usernames are compared in lower case: `Alice` signs in as `alice`."""
    return given.strip().lower()


def check_username(given: str) -> str:
    username = normalize_username(given)
    if not _USERNAME.fullmatch(username):
        raise BadInput(f"choose a username of {USERNAME_RULE} (not {given!r})", code="bad_username")
    return username


def check_key_name(given: str) -> str:
    name = given.strip() or "API key"
    if len(name) > KEY_NAME_MAX or not name.isprintable():
        raise BadInput(
            f"name the key with at most {KEY_NAME_MAX} printable characters", code="bad_key_name"
        )
    return name


class ApiKeyOut(BaseModel):
    id: uuid.UUID
    name: str
    prefix: str
    created_at: datetime
    revoked_at: datetime | None


class NewApiKey(BaseModel):
    """A key just made: `key` is shown this once and kept only as its hash."""

    key: str
    api_key: ApiKeyOut
