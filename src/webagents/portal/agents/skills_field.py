"""An agent's `skills` on the portal (SPEC P4), in the two shapes clients send it.

Our CLI sends the list of AGENT.md (`["memory", {"session": {"backend": "robutler"}}]`); the
platform's SDK sends a mapping of skill name to settings (`{"memory": {"portal": true},
"openai": {}}`). Both are kept exactly as sent and answered as sent, so each client reads
back the shape it wrote (our CLI's answers do not change). The portal runs no skill: it
checks the shape, not the skills or their settings, which the agent's own runtime checks.

Refusals say which shape is expected. Settings are JSON kept in a JSON column: bounded in
depth and size, finite numbers, storable text (no NUL, no lone surrogate), so that what is
kept can always be read back and answered.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from ..errors import BadInput
from ..storable import check_storable

MAX_SKILLS = 100
MAX_DEPTH = 16  # of a skill's settings: an object inside an object ... 16 deep
MAX_BYTES = 64 * 1024  # of the whole field as JSON
# A built-in skill's name, or a skill of the owner's own as `package.module:ClassName`.
NAME_RULE = "1-200 characters of A-Z a-z 0-9 . _ - / :, starting with a letter or digit"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:-]{0,199}")

SHAPES = (
    'skills is a list as in AGENT.md (["memory", {"session": {"backend": "robutler"}}]) or a '
    'mapping of skill name to its settings ({"memory": {"portal": true}, "openai": {}})'
)

Skills = list[Any] | dict[str, Any]


def _refuse(problem: str) -> BadInput:
    return BadInput(f"{problem}: {SHAPES}", code="bad_skills")


def _check_name(name: object, where: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise _refuse(f"{where} names a skill {name!r}, but a skill's name is {NAME_RULE}")
    return name


def _kind(value: object) -> str:
    """What a JSON value is, in JSON's words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def _check_settings(value: object, where: str) -> None:
    if not isinstance(value, dict):
        raise _refuse(f"{where} is {_kind(value)}, not an object of settings ({{}} for none)")
    _check_json(value, where, 1)


def _check_json(value: object, where: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise BadInput(
            f"{where} is nested more than {MAX_DEPTH} levels deep: flatten the skill's settings",
            code="bad_skills",
        )
    if isinstance(value, str):
        check_storable(where, value)
    elif isinstance(value, float) and not math.isfinite(value):
        raise BadInput(
            f"{where} is {value}, which JSON cannot keep: give a finite number",
            code="bad_skills",
        )
    elif isinstance(value, dict):
        for key, item in value.items():
            check_storable(f"{where} (a key)", key)
            _check_json(item, f"{where}.{key}", depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_json(item, f"{where}[{index}]", depth + 1)


def _check_size(skills: Skills) -> None:
    if len(skills) > MAX_SKILLS:
        raise BadInput(
            f"skills names {len(skills)} skills, over the {MAX_SKILLS} an agent may have",
            code="bad_skills",
        )
    size = len(json.dumps(skills, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    if size > MAX_BYTES:
        raise BadInput(
            f"skills is {size:,} bytes as JSON, over {MAX_BYTES:,}: keep large settings out "
            "of the agent's skills",
            code="bad_skills",
        )


def check_skills(given: object) -> Skills:
    """`given` if it is one of the two shapes, else a 400 `bad_skills` that says which."""
    if isinstance(given, dict):
        for name, settings in given.items():
            _check_name(name, "skills")
            _check_settings(settings, f"skills.{name}")
        _check_size(given)
        return given
    if not isinstance(given, list):
        raise _refuse(f"skills is {_kind(given)}")
    seen: set[str] = set()
    for index, entry in enumerate(given):
        where = f"skills[{index}]"
        if isinstance(entry, dict):
            if len(entry) != 1:
                raise _refuse(f"{where} is an object of {len(entry)} keys, not one skill's")
            ((name, settings),) = entry.items()
            _check_settings(settings, f"{where}.{name}")
        elif isinstance(entry, str):
            name = entry
        else:
            raise _refuse(f"{where} is {_kind(entry)}, not a skill's name or a one-key object")
        if _check_name(name, where) in seen:
            raise BadInput(
                f"{where} names the skill {name!r} again: list each skill once",
                code="bad_skills",
            )
        seen.add(name)
    _check_size(given)
    return given
