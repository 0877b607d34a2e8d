"""The skills an agent file can name: the built-in ones by name, any other by import path.

Apart from `skills/__init__` so that importing any one skill (or `skills.base`) does not
load every built-in skill: the memory and session skills use the portal link, which uses
the note and conversation stores, and none of them may find the skills' package half made.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from ..errors import ConfigError
from .base import Skill

_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def registry() -> dict[str, type[Skill[Any]]]:
    """Skill name -> class, for the built-in skills."""
    # Loaded when an agent file is read, not when this module is: a command that reads none
    # does not pay for every skill's imports.
    from .auth import AuthSkill
    from .mcp import McpSkill
    from .memory import MemorySkill
    from .openai import OpenAISkill
    from .session import SessionSkill

    return {cls.name: cls for cls in (OpenAISkill, MemorySkill, SessionSkill, AuthSkill, McpSkill)}


def is_import_path(name: str) -> bool:
    """`package.module:ClassName`, how an agent file names a skill of its own."""
    return bool(_IMPORT_PATH.fullmatch(name))


def import_skill(path: str) -> type[Skill[Any]]:
    """The Skill class at `package.module:ClassName`; ConfigError saying what is wrong."""
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import the skill {path}: {exc}") from None
    found = getattr(module, attribute, None)
    if not (isinstance(found, type) and issubclass(found, Skill)):
        raise ConfigError(f"{path} is not a Skill class")
    return found
