"""PortalError: what the portal refuses, with the HTTP status and a stable code.

The API answers these as OpenAI-shaped JSON; the pages show the message above the form.
Messages are for the person at the other end and say what to do.
"""

from __future__ import annotations

from ..errors import WebAgentsError


class PortalError(WebAgentsError):
    """A refusal with its HTTP `status` and machine-readable `code`."""

    status = 400
    code = "bad_request"

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code


class BadInput(PortalError):
    status = 400
    code = "invalid_request"


class Unauthorized(PortalError):
    status = 401
    code = "unauthorized"


class Forbidden(PortalError):
    status = 403
    code = "forbidden"


class NotFound(PortalError):
    """Also the answer for another account's things: their existence is not revealed."""

    status = 404
    code = "not_found"


class Conflict(PortalError):
    status = 409
    code = "conflict"


class TooManyRequests(PortalError):
    status = 429
    code = "rate_limited"
