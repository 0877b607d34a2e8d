"""The session skill: conversations kept per caller (its store is `webagents.sessions`)."""

from .skill import SessionSettings, SessionSkill

__all__ = ["SessionSettings", "SessionSkill"]
