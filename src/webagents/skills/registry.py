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


# Each built-in skill's name and where its class is: a skill is imported when an agent file
# names it, so that an agent without `mcp` or `auth` does not load the MCP SDK (about 0.5 s
# of every process) or PyJWT and cryptography.
_BUILT_IN = {
    "openai": ".openai:OpenAISkill",
    "memory": ".memory:MemorySkill",
    "session": ".session:SessionSkill",
    "auth": ".auth:AuthSkill",
    "mcp": ".mcp:McpSkill",
}


def built_in_names() -> list[str]:
    """The names of the built-in skills, sorted."""
    return sorted(_BUILT_IN)


def built_in_skill(name: str) -> type[Skill[Any]] | None:
    """The built-in skill called `name` (its module imported now); None when none is."""
    where = _BUILT_IN.get(name)
    if where is None:
        return None
    module, _, attribute = where.partition(":")
    found = getattr(importlib.import_module(module, __package__), attribute)
    assert isinstance(found, type) and issubclass(found, Skill) and found.name == name, where
    return found


def registry() -> dict[str, type[Skill[Any]]]:
    """Skill name -> class, for every built-in skill (all of them imported)."""
    classes = (built_in_skill(name) for name in _BUILT_IN)
    return {cls.name: cls for cls in classes if cls is not None}


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
