"""S6/S7: what a client is told when a turn fails on its kept conversation
(server/turn_errors.py): one another request went on with is not called damaged; a damaged
one is."""

from __future__ import annotations

from webagents.server.turn_errors import runtime_error
from webagents.sessions import SessionConflict, SessionError


def test_s6_a_conversation_another_request_went_on_with_is_409_conversation_changed() -> None:
    told = runtime_error(SessionConflict("trip"))
    assert told.status == 409
    assert told.code == "conversation_changed"
    assert "'trip' went on meanwhile" in told.message
    assert "damaged" not in told.message


def test_s7_a_session_that_cannot_be_read_is_409_session_unreadable() -> None:
    told = runtime_error(SessionError("/home/x/sessions/trip.json: not JSON"))
    assert told.status == 409
    assert told.code == "session_unreadable"
    assert "/home/x" not in told.message  # the path is for the owner's log, not the client
