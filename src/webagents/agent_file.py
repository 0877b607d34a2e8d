"""AGENT.md -> AgentSpec: YAML front matter and the instructions, checked strictly.

Every problem is an `AgentFileError` naming the file and, where it can, the line: an unknown
key or skill or setting is refused with the list of what is accepted, and YAML errors are
reported where the parser found them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .agent import DEFAULT_MAX_TURNS, Agent
from .caller import RESERVED_PREFIXES, issuer_is_nameable
from .compaction import MODEL_NAME, Compaction, CompactionSpec
from .errors import AgentFileError, ConfigError, validation_problems
from .model import Model
from .skills import import_skill, is_import_path, registry
from .skills.base import Skill

AGENT_FILE = "AGENT.md"
KNOWN_KEYS = ("name", "description", "model", "skills", "access", "compaction")
_AGENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_SECRET = re.compile(r"^(env:[A-Za-z_][A-Za-z0-9_]*|sha256:[0-9a-f]{64})$")


def check_secret(value: str, *, what: str = "") -> str:
    """A5: secrets are `env:NAME` or `sha256:<hex>`, never the secret itself."""
    if not _SECRET.fullmatch(value):
        raise ValueError(
            f"{what + ' ' if what else ''}must be env:NAME (read from the environment) or "
            "sha256:<64 hex digits> "
            "(the key's SHA-256 digest); a plaintext secret does not belong in AGENT.md"
        )
    return value


class JwtIssuer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    issuer: str
    jwks: str
    audience: str
    identity: list[str] = Field(default_factory=lambda: ["sub"], min_length=1)
    algorithms: list[str] = Field(default_factory=lambda: ["RS256", "ES256", "EdDSA"])
    plain_identity: bool = False
    """True: this issuer's tokens name the same callers as API keys with that identity.
    False (the default): its callers' namespaces carry the issuer, `jwt:<issuer>#<identity>`,
    so no other issuer and no API key can reach them by naming the same `sub` or email."""

    @field_validator("issuer")
    @classmethod
    def _issuer(cls, value: str) -> str:
        if not issuer_is_nameable(value):
            raise ValueError(
                "the issuer names its callers' namespaces (jwt:<issuer>#<identity>): it must "
                "be non-empty, with no '#', comma or control character"
            )
        return value

    @field_validator("algorithms")
    @classmethod
    def _no_none(cls, value: list[str]) -> list[str]:
        if any(alg.lower() == "none" or alg.upper().startswith("HS") for alg in value):
            raise ValueError("only asymmetric algorithms (RS*, PS*, ES*, EdDSA) are accepted")
        return value


class AccessSpec(BaseModel):
    """The `access:` block (A6): who the agent can verify over HTTP."""

    model_config = ConfigDict(extra="forbid")

    owner: str | None = None
    keys: dict[str, str] = Field(default_factory=dict)
    jwt: list[JwtIssuer] = Field(default_factory=list)
    channels: dict[str, str] = Field(default_factory=dict)

    @field_validator("owner")
    @classmethod
    def _owner(cls, value: str | None) -> str | None:
        return None if value is None else check_secret(value)

    @field_validator("keys")
    @classmethod
    def _keys(cls, value: dict[str, str]) -> dict[str, str]:
        for identity, secret in value.items():
            for prefix, kept_for in RESERVED_PREFIXES.items():
                if identity.startswith(prefix):
                    raise ValueError(
                        f"the identity {identity!r} starts with {prefix!r}, which is kept for "
                        f"{kept_for}: name the key's caller without it"
                    )
            check_secret(secret, what=f"the key of {identity!r}")
        return value

    @field_validator("jwt")
    @classmethod
    def _one_entry_per_issuer(cls, value: list[JwtIssuer]) -> list[JwtIssuer]:
        seen: set[str] = set()
        for entry in value:
            if entry.issuer in seen:
                raise ValueError(
                    f"the issuer {entry.issuer} is listed twice: give each issuer one entry"
                )
            seen.add(entry.issuer)
        return value

    @field_validator("channels")
    @classmethod
    def _channels(cls, value: dict[str, str]) -> dict[str, str]:
        for channel, secret in value.items():
            if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,31}", channel):
                raise ValueError(f"channel type {channel!r} must be a short slug like telegram")
            check_secret(secret, what=f"the bridge key of {channel!r}")
        return value


@dataclass(frozen=True, slots=True)
class SkillEntry:
    name: str
    settings: dict[str, Any]
    skill: Skill[Any]
    line: int | None = None


@dataclass(frozen=True, slots=True)
class AgentSpec:
    path: Path
    name: str
    instructions: str
    description: str = ""
    model: str | None = None
    skills: tuple[SkillEntry, ...] = ()
    access: AccessSpec | None = None
    compaction: CompactionSpec | None = None

    @property
    def directory(self) -> Path:
        return self.path.parent


def agent_file_path(path: Path | str) -> Path:
    """AGENT.md of a folder, or the file itself when a `.md` file is named."""
    path = Path(path)
    return path if path.suffix.lower() == ".md" and not path.is_dir() else path / AGENT_FILE


def load_spec(path: Path | str) -> AgentSpec:
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
    known = registry()
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
        if not isinstance(name, str) or (name not in known and not is_import_path(name)):
            raise AgentFileError(
                f"unknown skill {name!r}; the skills are: {', '.join(sorted(known))} "
                "(or a skill of your own as package.module:ClassName)",
                file=file,
                line=item_line,
            )
        if any(entry.name == name for entry in entries):
            raise AgentFileError(f"skill {name!r} is listed twice", file=file, line=item_line)
        try:
            cls = known[name] if name in known else import_skill(name)
            skill = cls.from_settings(settings)
        except ConfigError as exc:
            raise AgentFileError(str(exc), file=file, line=item_line) from None
        entries.append(SkillEntry(name, dict(settings or {}), skill, item_line))
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
    spec = load_spec(path)
    skills: list[Skill[Any]] = [entry.skill for entry in spec.skills]
    if spec.model and not any(skill.name == "openai" for skill in skills):
        from .skills.openai import OpenAISkill

        skills.insert(0, OpenAISkill())
    agent = Agent(
        spec.name,
        spec.instructions,
        skills=skills,
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
