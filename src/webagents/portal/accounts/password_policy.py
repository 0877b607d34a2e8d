"""Which passwords the portal refuses (issue 21), wherever one is chosen: the sign-up page,
a password change, `webagents portal adduser` and `passwd`. Besides the length: a common
password (a small list shipped in the package, and those words with digits or signs around
them), one that repeats a few characters or a short pattern, a run along the alphabet, the
digits or a keyboard row, and one that contains the username. Each refusal says what is
wanted instead."""

from __future__ import annotations

import functools
import string
from importlib import resources

from ..errors import BadInput

PASSWORD_MIN = 10
PASSWORD_MAX = 1024
DISTINCT_MIN = 5
RULE = (
    f"at least {PASSWORD_MIN} characters with at least {DISTINCT_MIN} different ones, not a "
    "common password, not a pattern, and not containing your username"
)
# Runs a person types without thinking: along the alphabet, the digits and keyboard rows.
_RUNS = (
    string.ascii_lowercase,
    string.digits,
    "qwertyuiop",
    "asdfghjkl",
    "zxcvbnm",
    "qwertzuiop",
    "azertyuiop",
    "1qaz2wsx3edc4rfv5tgb",
    "qazwsxedcrfvtgbyhn",
)
_AROUND = string.digits + string.punctuation + " "


@functools.cache
def common_passwords() -> frozenset[str]:
    text = resources.files(__package__).joinpath("common-passwords.txt").read_text("utf-8")
    lines = (line.strip() for line in text.splitlines())
    return frozenset(line for line in lines if line and not line.startswith("#"))


def _weak(message: str) -> BadInput:
    return BadInput(f"{message}: choose a password of {RULE}", code="weak_password")


def _is_run(lowered: str) -> bool:
    """All of it (less digits or signs around it) along one run, either way, going round."""
    core = lowered.strip(_AROUND) or lowered
    return len(core) >= 4 and any(core in run * 2 or core in run[::-1] * 2 for run in _RUNS)


def _is_repeated(password: str) -> bool:
    """A short unit said over and over (`abcabcabca`, `12121212`)."""
    for size in range(1, len(password) // 2 + 1):
        unit = password[:size]
        if (unit * (len(password) // size + 1)).startswith(password):
            return True
    return False


def check_password(password: str, username: str | None = None) -> str:
    """The password, when it may be used (for `username`, where one is known)."""
    if len(password) < PASSWORD_MIN:
        raise _weak(f"this password has {len(password)} characters")
    if len(password) > PASSWORD_MAX:
        raise BadInput(
            f"choose a password of at most {PASSWORD_MAX} characters", code="bad_password"
        )
    lowered = password.lower()
    if lowered in common_passwords() or lowered.strip(_AROUND) in common_passwords():
        raise _weak("this is one of the most common passwords, tried first by anyone guessing")
    if len(set(password)) < DISTINCT_MIN or _is_repeated(password):
        raise _weak("this password repeats a few characters or a short pattern")
    if _is_run(lowered):
        raise _weak("this password is a run along the alphabet, the digits or the keyboard")
    if username and username.lower() in lowered:
        raise _weak("this password contains the username")
    return password
