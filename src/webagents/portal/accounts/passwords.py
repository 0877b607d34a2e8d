"""Password hashes: argon2id (memory-hard), with argon2-cffi's RFC 9106 parameters.

The test suite alone sets WEBAGENTS_TEST_CHEAP_PASSWORD_HASHES=1: argon2's cheapest
parameters, as a hash at RFC 9106's cost is most of a second on a small machine and the suite
makes thousands. Hashes made so are still checked with the parameters written in them."""

from __future__ import annotations

import functools
import os

from argon2 import Parameters, PasswordHasher, profiles
from argon2.exceptions import InvalidHashError, VerificationError

CHEAP_FOR_TESTS_ENV = "WEBAGENTS_TEST_CHEAP_PASSWORD_HASHES"


def parameters() -> Parameters:
    """The parameters new hashes are made with: RFC 9106's low-memory choice (64 MiB, 3 passes,
    4 lanes), unless the test suite's variable asks for the cheapest."""
    if os.environ.get(CHEAP_FOR_TESTS_ENV) == "1":
        return profiles.CHEAPEST
    return profiles.RFC_9106_LOW_MEMORY


@functools.cache
def _hasher() -> PasswordHasher:
    return PasswordHasher.from_parameters(parameters())


def hash_password(password: str) -> str:
    return _hasher().hash(password)


def verify_password(stored: str | None, password: str) -> bool:
    """Whether `password` matches; with no stored hash (no such user) a dummy hash is checked
    all the same, so that the answer takes as long and does not tell which usernames exist."""
    try:
        return _hasher().verify(stored or _dummy_hash(), password) and stored is not None
    except (VerificationError, InvalidHashError):
        return False


@functools.cache
def _dummy_hash() -> str:
    return _hasher().hash("no such user: this hash matches nothing anyone types")
