"""The memory skill: notes kept apart for every caller an agent serves."""

from .rights import Rights, rights_of
from .settings import MemorySettings
from .skill import MemorySkill

__all__ = ["MemorySettings", "MemorySkill", "Rights", "rights_of"]
