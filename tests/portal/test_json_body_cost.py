"""The body check every JSON body of the portal meets (issue 21; portal/json_body.py) runs in
the server's event loop before anyone is verified, so its cost must grow with the body's size
and no faster: a body of long numbers (each under a double's range) took a minute a megabyte
(its number pattern backtracked over every digit of every number), and a 10 MB body held the
whole portal for ten. And it still refuses every number past a double's range, and only
those."""

from __future__ import annotations

import subprocess
import sys

import pytest

from webagents.portal import json_body

BOUND_SECONDS = 60.0
"""A bound on the wait for one check of a body at the portal's cap (10 MB); a linear check
takes a fraction of a second, the backtracking one over ten minutes. The check runs in a
process of its own: one long pattern match holds its thread, and its interpreter, to the end."""

_CHECK_AT_THE_CAP = """
import sys
from webagents.portal import json_body
from webagents.portal.body_limit import DEFAULT_MAX_BODY_BYTES
head, unit = sys.argv[1], sys.argv[2]
print(json_body.problem((head + unit * (DEFAULT_MAX_BODY_BYTES // len(unit) - 1)).encode()))
"""


def _checked_at_the_cap(head: str, unit: str) -> str:
    """The check of `head` and then `unit` again and again up to the portal's cap."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHECK_AT_THE_CAP, head, unit],
            capture_output=True,
            text=True,
            timeout=BOUND_SECONDS,
            check=True,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the body check did not end within its bound (it backtracks)")
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("head", "unit"),
    [
        ("[", "1" * 300 + ","),
        ("[", "-" + "9" * 300 + ","),
        ("[", "1." + "5" * 300 + ","),
        ("[", "1" * 150 + "." + "2" * 150 + ","),
        ("[", "12345,"),
        ("", '"\\'),  # a string never closed, each quote in it escaped
        ("[", '"' + "a" * 1000 + '",'),
    ],
)
def test_json_body_checks_a_body_at_the_cap_in_one_pass(head: str, unit: str) -> None:
    assert _checked_at_the_cap(head, unit) == "None"


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"[1e400]", json_body.NOT_A_NUMBER),
        (b"[-1.5E+309]", json_body.NOT_A_NUMBER),
        (b'{"a": 0.5e309}', json_body.NOT_A_NUMBER),
        (b"[" + b"9" * 309 + b"]", json_body.NOT_A_NUMBER),
        (b"[-" + b"2" * 309 + b".5]", json_body.NOT_A_NUMBER),
        (b"[" + b"1" * 250 + b"e60]", json_body.NOT_A_NUMBER),
        (b"[" + b"9" * 400 + b"e-20]", json_body.NOT_A_NUMBER),
        (b"[1e308]", None),
        (b"[" + b"9" * 400 + b"e-95]", None),
        (b"[1.5e-400]", None),  # under a double's range is 0.0: finite, kept
        (b"[0." + b"1" * 400 + b"]", None),
        (b"[1." + b"1" * 400 + b"e2]", None),
        (b"[" + b"9" * 400 + b"e-200]", None),
        (b"[" + b"1" * 300 + b"]", None),
        (b"[1e0000000001]", None),
        (b'["1e400", "' + b"9" * 400 + b'"]', None),  # text, not numbers
        (b"[12345, -6.5e10]", None),
    ],
)
def test_json_body_refuses_every_number_past_a_doubles_range_and_only_those(
    body: bytes, problem: str | None
) -> None:
    assert json_body.problem(body) == problem
