"""AGENT.md -> AgentSpec, and the agent it describes: read strictly, then built.

Every problem is an `AgentFileError` naming the file and, where it can, the line: an unknown
key or skill or setting is refused with the list of what is accepted, and YAML errors are
reported where the parser found them. The loader sits above `Agent` and the skills: it is
the one place that turns the file's data (`agent_spec`) into live skills.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .agent import DEFAULT_MAX_TURNS, Agent
from .agent_spec import MODEL_NAME, AccessSpec, AgentSpec, CompactionSpec, SkillEntry
from .compaction import Compaction
from .errors import AgentFileError, ConfigError, validation_problems
from .model import Model
from .skills.base import Skill
from .skills.openai import OpenAISkill
from .skills.registry import built_in_names, built_in_skill, import_skill, is_import_path

AGENT_FILE = "AGENT.md"
KNOWN_KEYS = ("name", "description", "model", "skills", "access", "compaction")
_AGENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def agent_file_path(path: Path | str) -> Path:
    """AGENT.md of a folder, or the file itself when a `.md` file is named."""
    path = Path(path)
    return path if path.suffix.lower() == ".md" and not path.is_dir() else path / AGENT_FILE


def load_spec(path: Path | str) -> AgentSpec:
    """The agent file of a folder (or the file named), its skills and their settings checked."""
    spec = _read_spec(path)
    build_skills(spec)  # every skill named and its settings checked, as load_agent builds them
    return spec


def _read_spec(path: Path | str) -> AgentSpec:
    # Absolute but not resolved: an agent folder reached through a symlink keeps its name.
    file = Path(os.path.abspath(agent_file_path(path)))
    if not file.parent.is_dir():
        raise AgentFileError(
            "there is no such folder: give the folder of an agent", file=file.parent
        )
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AgentFileError(
            f"there is no {AGENT_FILE} here: create one (see examples/assistant/AGENT.md)",
            file=file,
        ) from None
    except UnicodeDecodeError as exc:
        raise AgentFileError(f"not valid UTF-8 (byte {exc.start})", file=file) from None
    return parse_spec(text, file)


def _split_front_matter(text: str, file: Path) -> tuple[str, str, int]:
    """(front matter, body, line of the front matter's first line)."""
    text = text.removeprefix("\ufeff")  # a byte-order mark some editors write
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip("\r\n").rstrip() != "---":
        first = next((n for n, line in enumerate(lines, 1) if line.strip()), None)
        if first is not None and lines[first - 1].strip() == "---":
            raise AgentFileError(
                "the front matter must start on the first line: remove the lines above ---",
                file=file,
                line=first,
            )
        return "", text, 1
    for index, line in enumerate(lines[1:], start=1):
        if line.rstrip("\r\n").rstrip() in ("---", "..."):
            return "".join(lines[1:index]), "".join(lines[index + 1 :]), 2
    raise AgentFileError(
        "the front matter opened on line 1 is never closed: add a line with --- after it",
        file=file,
        line=1,
    )


def parse_spec(text: str, file: Path) -> AgentSpec:
    front, body, first_line = _split_front_matter(text, file)
    data, key_lines, item_lines = _load_yaml(front, file, first_line)

    def fail(message: str, key: str | None = None, line: int | None = None) -> AgentFileError:
        return AgentFileError(
            message, file=file, line=line if line is not None else key_lines.get(key or "")
        )

    unknown = [k for k in data if k not in KNOWN_KEYS]
    if unknown:
        raise fail(f"unknown key {unknown[0]!r}; the keys are: {', '.join(KNOWN_KEYS)}", unknown[0])

    name = data.get("name", file.parent.name)
    if not isinstance(name, str) or not _AGENT_NAME.fullmatch(name):
        raise fail(
            f"agent name {name!r} must be 1-64 characters of letters, digits, . _ -, "
            "starting with a letter or digit: set name: in the front matter",
            "name",
        )
    description = data.get("description", "")
    if not isinstance(description, str):
        raise fail("description must be text", "description")
    model = data.get("model")
    if model is not None and (not isinstance(model, str) or not MODEL_NAME.fullmatch(model)):
        raise fail(
            f"model {model!r} is not supported: write openai/<model> (any OpenAI-compatible "
            "endpoint, chosen with OPENAI_BASE_URL)",
            "model",
        )

    skills = _parse_skills(data.get("skills", []), file, key_lines.get("skills"), item_lines)
    access = _typed(AccessSpec, data.get("access"), "access", fail)
    compaction = _typed(CompactionSpec, data.get("compaction"), "compaction", fail)
    return AgentSpec(
        path=file,
        name=name,
        instructions=body.strip("\n"),
        description=description,
        model=model,
        skills=skills,
        access=access,
        compaction=compaction,
    )


def _typed(model: type[Any], value: Any, key: str, fail: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise fail(f"{key} must be a mapping", key)
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        accepted = ", ".join(model.model_fields)
        problems = validation_problems(
            exc,
            unknown=lambda where: f"unknown setting {key}.{where}",
            wrong=lambda where, msg: f"{key}.{where}: {msg}",
        )
        if any(err["type"] == "extra_forbidden" for err in exc.errors()):
            problems += f" (the {key} block takes: {accepted})"
        raise fail(problems, key) from None


def _parse_skills(
    value: Any, file: Path, line: int | None, item_lines: list[int]
) -> tuple[SkillEntry, ...]:
    if not isinstance(value, list):
        raise AgentFileError(
            "skills must be a list, such as:\nskills:\n  - openai\n  - memory: {local: true}",
            file=file,
            line=line,
        )
    entries: list[SkillEntry] = []
    for index, item in enumerate(value):
        item_line = item_lines[index] if index < len(item_lines) else line
        if isinstance(item, str):
            name, settings = item, None
        elif isinstance(item, dict) and len(item) == 1:
            [(name, settings)] = item.items()
        else:
            raise AgentFileError(
                "each skill is a name (- memory) or a name with its settings "
                "(- memory: {local: true})",
                file=file,
                line=item_line,
            )
        if not isinstance(name, str):
            raise _unknown_skill(name, file, item_line)
        if any(entry.name == name for entry in entries):
            raise AgentFileError(f"skill {name!r} is listed twice", file=file, line=item_line)
        entries.append(SkillEntry(name, {} if settings is None else settings, item_line))
    return tuple(entries)


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (the last would win)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _load_yaml(
    front: str, file: Path, first_line: int
) -> tuple[dict[str, Any], dict[str, int], list[int]]:
    """The front matter's data, the line of each top-level key, and of each skills item."""
    if not front.strip():
        return {}, {}, []
    try:
        node = yaml.compose(front, Loader=yaml.SafeLoader)
        data = yaml.load(front, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + first_line if mark is not None else None
        problem = exc.problem or exc.context or "invalid YAML"
        raise AgentFileError(
            f"YAML error in the front matter: {problem}", file=file, line=line
        ) from None
    except yaml.YAMLError as exc:
        raise AgentFileError(f"YAML error in the front matter: {exc}", file=file) from None
    except (TypeError, ValueError, RecursionError) as exc:  # unhashable keys, deep nesting
        raise AgentFileError(
            f"the front matter cannot be read ({type(exc).__name__}): use plain keys and values",
            file=file,
        ) from None
    if data is None:
        return {}, {}, []
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        raise AgentFileError(
            "the front matter must be a mapping of keys (name:, model:, skills: ...)",
            file=file,
            line=first_line,
        )
    key_lines: dict[str, int] = {}
    item_lines: list[int] = []
    for key_node, value_node in node.value:
        key_lines[str(key_node.value)] = key_node.start_mark.line + first_line
        if key_node.value == "skills" and isinstance(value_node, yaml.SequenceNode):
            item_lines = [item.start_mark.line + first_line for item in value_node.value]
    return data, key_lines, item_lines


def _unknown_skill(name: object, file: Path, line: int | None) -> AgentFileError:
    return AgentFileError(
        f"unknown skill {name!r}; the skills are: {', '.join(built_in_names())} "
        "(or a skill of your own as package.module:ClassName)",
        file=file,
        line=line,
    )


def build_skills(spec: AgentSpec) -> list[Skill[Any]]:
    """The live skills the agent file names, each built from its settings (the openai skill
    added first when only `model:` names it); AgentFileError at the entry's line."""
    skills: list[Skill[Any]] = []
    for entry in spec.skills:
        built_in = built_in_skill(entry.name)
        if built_in is None and not is_import_path(entry.name):
            raise _unknown_skill(entry.name, spec.path, entry.line)
        try:
            cls = built_in if built_in is not None else import_skill(entry.name)
            skills.append(cls.from_settings(entry.settings))
        except ConfigError as exc:
            raise AgentFileError(str(exc), file=spec.path, line=entry.line) from None
    if spec.model and not any(skill.name == OpenAISkill.name for skill in skills):
        skills.insert(0, OpenAISkill())
    return skills


def load_agent(
    path: Path | str,
    *,
    model: Model | None = None,
    profile: str | None = None,
    max_turns: int = DEFAULT_MAX_TURNS,
) -> Agent:
    """The agent in a folder (or an AGENT.md file), ready to start conversations.

    `model` replaces the one the agent file names (tests pass a ScriptedModel here).
    """
    spec = _read_spec(path)
    agent = Agent(
        spec.name,
        spec.instructions,
        skills=build_skills(spec),
        model=model,
        model_name=spec.model,
        description=spec.description,
        max_turns=max_turns,
        directory=spec.directory,
        profile=profile,
        compaction=Compaction.from_spec(spec.compaction) if spec.compaction else None,
    )
    agent.spec = spec
    return agent
