"""What every JSON body the portal reads must be, checked once for all routes (BodyLimit calls
it before any route parses): nested at most MAX_DEPTH arrays and objects deep, and without
NaN or Infinity (nor a number too large for a double, which Python reads as infinity).

Python's parser takes both, and each broke something further in: a body nested about a
thousand deep is a RecursionError (a 500) in whichever parser meets it first; NaN is a float
to Python and an error to PostgreSQL's JSON (a 500 at the insert), and no other JSON reader
takes it. The check reads the bytes without building the value, so a body the routes go on to
parse costs a second pass in C, not a second parse. What is not JSON at all is left to the
route, whose error says what it expected.
"""

from __future__ import annotations

import math
import re
from array import array
from itertools import accumulate

MAX_DEPTH = 512
"""Deeper than any request of the API needs by far, and well under the ~1,000 levels where
Python's own JSON reader and writer give up (the portal re-writes a relayed body once)."""

# A string, its closing quote optional: one never closed (not JSON, which the route refuses)
# then ends the match at the body's end. Where the quote was required, each quote inside it
# began a new try to its end, and a megabyte of `"\` took minutes.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_A_NUMBER = re.compile(rb"NaN|Infinity")
# Numbers that may pass a double's range once read (each found whole, and read to know): an
# exponent of three digits or more, or 200 digits or more before the point (with an exponent
# of two digits at most, the least that can reach 1e309). Each alternative starts only where
# a number starts (the look-behinds), so a try that fails gives up after that number: a
# pattern free to start at any digit tried again from each one, a minute a megabyte of
# 300-digit numbers, in the event loop, before the caller was even verified.
_LARGE_NUMBER = re.compile(
    rb"(?<![0-9.])-?[0-9]+(?:\.[0-9]+)?[eE][+-]?[0-9]{3,}"
    rb"|(?<![0-9.])-?[0-9]{200,}(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
)
# Opening brackets count +1 and closing ones -1 (255 as a signed byte); nothing else is kept.
_DEPTH_STEP = bytes(
    1 if chr(byte) in "[{" else 255 if chr(byte) in "]}" else 0 for byte in range(256)
)
_NOT_A_BRACKET = bytes(byte for byte in range(256) if chr(byte) not in "[]{}")

TOO_DEEP = (
    f"the request body nests JSON arrays and objects more than {MAX_DEPTH} deep, more than "
    "the portal reads: send a flatter body"
)
NOT_A_NUMBER = (
    "the request body holds NaN, Infinity or a number past a double's range, which the portal "
    "cannot keep: send a finite number, or null for none"
)


def problem(body: bytes) -> str | None:
    """Why the portal will not read `body` as JSON (TOO_DEEP, NOT_A_NUMBER), or None."""
    outside = _STRING.sub(b"", body)  # what strings hold is text, never structure
    if _NOT_A_NUMBER.search(outside):
        return NOT_A_NUMBER
    for number in _LARGE_NUMBER.findall(outside):
        if not math.isfinite(float(number)):
            return NOT_A_NUMBER
    brackets = outside.translate(None, _NOT_A_BRACKET)
    if len(brackets) <= MAX_DEPTH:
        return None  # too few to nest that deep (most bodies)
    steps = array("b", brackets.translate(_DEPTH_STEP))
    if max(accumulate(steps), default=0) > MAX_DEPTH:
        return TOO_DEEP
    return None
