"""Times as the wire writes them (ISO 8601, `Z` for UTC: pydantic's JSON, which the portal
answers with), for the places that show or keep a time the portal sent as text."""

from __future__ import annotations

from datetime import datetime

from pydantic import TypeAdapter

_TIME = TypeAdapter(datetime)


def wire_time(moment: datetime) -> str:
    text: str = _TIME.dump_python(moment, mode="json")
    return text
