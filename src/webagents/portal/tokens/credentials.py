"""Secrets the portal hands out (browser session tokens, `rok_...` API keys and agent keys)
and how they are kept: only a SHA-256 of each is stored. They are 256 random bits, so a fast
hash is enough (no dictionary to try); passwords, chosen by people, get argon2
(accounts/passwords.py)."""

from __future__ import annotations

import hashlib
import secrets

API_KEY_PREFIX = "rok_"


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_session_token() -> str:
    return secrets.token_urlsafe(32)


def new_api_key() -> str:
    return API_KEY_PREFIX + secrets.token_urlsafe(32)


def shown_prefix(key: str) -> str:
    """The start of a key, kept to tell a user's keys apart on the keys page."""
    return key[: len(API_KEY_PREFIX) + 6]
