"""What goes wrong between an agent and its portal, each saying what to run: a refused
credential is a SignInError ("run webagents login"), a portal that does not answer (or answers
something that is not its API) says where it was looked for."""

from __future__ import annotations

from pydantic import ValidationError

from ..errors import ConfigError, WebAgentsError


class PortalUnreachable(WebAgentsError):
    """The portal did not answer, or answered something that is not its API."""


class BadAnswer(WebAgentsError):
    """The portal answered, but not with the shape this client reads (portal_wire): the
    message names the field and what to run. Kept work waits, as for any failure of the
    portal's, and the failure is shown (/memory, the chat's notes) instead of "no answer"."""


class SignInError(ConfigError):
    """The portal refused the credential: the user must sign in (again)."""


class Refused(ConfigError):
    """The portal refused the request (a 4xx other than 401); the message is its own."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class StaleEntry(Refused):
    """A memory entry's `content_sha256` precondition was stale (409): the entry changed in
    the portal since this client last saw it, and nothing was changed."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=409)


class BadCursor(Refused):
    """The portal does not know the sync cursor sent back (400 `bad_cursor`): one kept by
    another portal, or damaged. Pulling from the start again is safe (a line already here
    changes nothing)."""


def first_problem(exc: ValidationError) -> tuple[str, str]:
    """The first field an answer got wrong (`lines.0.at`) and pydantic's word on it."""
    problem = exc.errors()[0]
    return ".".join(str(part) for part in problem["loc"]), problem["msg"]


class AgentNotPublished(ConfigError):
    """The portal does not know the agent as this user's (a 404 of an agent's API)."""
