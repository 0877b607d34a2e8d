"""Password hashes (P1): argon2id at RFC 9106's cost in the product; the test suite's setting
for argon2's least cost reaches only the tests, and a hash keeps the cost it was made with."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from argon2 import profiles

from webagents.portal.accounts import passwords
from webagents.portal.accounts.passwords import (
    CHEAP_FOR_TESTS_ENV,
    hash_password,
    verify_password,
)

RFC_9106_PREFIX = "$argon2id$v=19$m=65536,t=3,p=4$"
CHEAPEST_PREFIX = "$argon2id$v=19$m=8,t=1,p=1$"


def _in_a_fresh_python(code: str, *args: str) -> str:
    """What `code` prints in a new interpreter whose environment lacks the tests' setting."""
    env = {key: value for key, value in os.environ.items() if key != CHEAP_FOR_TESTS_ENV}
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_p1_the_product_hashes_passwords_at_rfc_9106_cost() -> None:
    printed = _in_a_fresh_python(
        "from webagents.portal.accounts.passwords import hash_password, verify_password\n"
        "stored = hash_password('correct horse')\n"
        "print(stored)\n"
        "print(verify_password(stored, 'correct horse'), verify_password(stored, 'wrong'))\n"
    )
    stored, verdicts = printed.splitlines()
    assert stored.startswith(RFC_9106_PREFIX), stored
    assert verdicts == "True False"


@pytest.mark.parametrize("value", ["", "0", "yes", "true"])
def test_p1_only_the_value_1_lowers_the_cost(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(CHEAP_FOR_TESTS_ENV, value)
    assert passwords.parameters() == profiles.RFC_9106_LOW_MEMORY
    monkeypatch.delenv(CHEAP_FOR_TESTS_ENV)
    assert passwords.parameters() == profiles.RFC_9106_LOW_MEMORY
    monkeypatch.setenv(CHEAP_FOR_TESTS_ENV, "1")
    assert passwords.parameters() == profiles.CHEAPEST


def test_p1_the_suite_hashes_at_the_least_cost_and_still_refuses_a_wrong_password() -> None:
    stored = hash_password("correct horse")
    assert stored.startswith(CHEAPEST_PREFIX), stored
    assert (verify_password(stored, "correct horse"), verify_password(stored, "wrong")) == (
        True,
        False,
    )
    assert (verify_password(None, "correct horse"), verify_password("not a hash", "x")) == (
        False,
        False,
    )


def test_p1_a_hash_is_checked_at_the_cost_it_was_made_with() -> None:
    """A product process (RFC 9106 parameters) checks a cheap hash, and the suite's cheap
    hasher checks a product hash: the parameters are read from the hash itself."""
    cheap = hash_password("correct horse")
    printed = _in_a_fresh_python(
        "import sys\n"
        "from webagents.portal.accounts.passwords import hash_password, verify_password\n"
        "print(verify_password(sys.argv[1], 'correct horse'), verify_password(sys.argv[1], 'x'))\n"
        "print(hash_password('battery staple'))\n",
        cheap,
    )
    verdicts, costly = printed.splitlines()
    assert verdicts == "True False"
    assert costly.startswith(RFC_9106_PREFIX)
    assert verify_password(costly, "battery staple")
    assert not verify_password(costly, "x")
