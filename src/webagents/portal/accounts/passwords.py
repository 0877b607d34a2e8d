"""Password hashes: argon2id (memory-hard), with argon2-cffi's RFC 9106 parameters."""

from __future__ import annotations

import functools

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

_hasher = PasswordHasher()


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(stored: str | None, password: str) -> bool:
    """Whether `password` matches; with no stored hash (no such user) a dummy hash is checked
    all the same, so that the answer takes as long and does not tell which usernames exist."""
    try:
        return _hasher.verify(stored or _dummy_hash(), password) and stored is not None
    except (VerificationError, InvalidHashError):
        return False


@functools.cache
def _dummy_hash() -> str:
    return _hasher.hash("no such user: this hash matches nothing anyone types")
