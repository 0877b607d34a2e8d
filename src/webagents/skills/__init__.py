"""The skills an agent file can name, by name."""

from __future__ import annotations

from typing import Any

from .base import ChatIO, Skill, SlashCommand, Tool, tool


def registry() -> dict[str, type[Skill[Any]]]:
    """Skill name -> class, for the built-in skills."""
    from .openai import OpenAISkill

    return {cls.name: cls for cls in (OpenAISkill,)}


__all__ = ["ChatIO", "Skill", "SlashCommand", "Tool", "registry", "tool"]
