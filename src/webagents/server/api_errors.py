"""Errors of the HTTP API, each with its status and OpenAI's error type."""

from __future__ import annotations

from ..errors import WebAgentsError

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "server_error",
    502: "server_error",
    503: "server_error",
}


class ApiError(WebAgentsError):
    """An error answered as {"error": {"message", "type", "code"}} with `status`."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        self.status = status
        self.message = message
        self.code = code
        super().__init__(message)

    @property
    def type(self) -> str:
        return error_type(self.status)


def not_taken(path: str, method: str, allowed: str) -> str:
    """A 405's message (`method_not_allowed`, with `Allow: allowed`), on serve, the daemon
    and through the portal alike."""
    return f"{path} does not take {method}: send {allowed}"


def error_type(status: int) -> str:
    return _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
