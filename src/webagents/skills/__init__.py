"""What a skill is made of (`base`); the built-in skills and the loading of others by import
path are in `registry`, which this package does not load."""

from .base import ChatIO, Skill, SlashCommand, Tool, tool

__all__ = ["ChatIO", "Skill", "SlashCommand", "Tool", "tool"]
