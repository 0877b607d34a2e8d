"""The memory skill: notes kept apart for every caller an agent serves."""

from .settings import MemorySettings
from .skill import MemorySkill

__all__ = ["MemorySettings", "MemorySkill"]
