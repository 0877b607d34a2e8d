"""R1, R2, A5: AGENT.md is read strictly, and every refusal says what is accepted."""

from __future__ import annotations

from pathlib import Path

import pytest

from webagents import load_agent
from webagents.agent_file import KNOWN_KEYS, build_skills, load_spec
from webagents.errors import AgentFileError, ConfigError
from webagents.skills.openai import OpenAIModel, OpenAISkill
from webagents.testing import ScriptedModel

from .conftest import write_agent


def test_r1_spec_fields_and_instructions(tmp_path: Path) -> None:
    folder = write_agent(
        tmp_path / "helper",
        """
name: helper
description: Helps.
model: openai/gpt-4o-mini
skills:
  - openai: {temperature: 0.2}
""",
        body="You help.\n\nTwo paragraphs.",
    )
    spec = load_spec(folder)
    assert (spec.name, spec.description, spec.model) == ("helper", "Helps.", "openai/gpt-4o-mini")
    assert spec.instructions == "You help.\n\nTwo paragraphs."
    assert [(e.name, e.settings, e.line) for e in spec.skills] == [
        ("openai", {"temperature": 0.2}, 6)
    ]
    [skill] = build_skills(spec)
    assert isinstance(skill, OpenAISkill)
    assert skill.settings.temperature == 0.2
    assert spec.path == (folder / "AGENT.md").resolve()


def test_r1_name_defaults_to_the_folder_and_front_matter_is_optional(tmp_path: Path) -> None:
    folder = tmp_path / "plain-agent"
    folder.mkdir()
    (folder / "AGENT.md").write_text("Just instructions.\n", encoding="utf-8")
    spec = load_spec(folder)
    assert (spec.name, spec.instructions, spec.skills, spec.model) == (
        "plain-agent",
        "Just instructions.",
        (),
        None,
    )


def test_r1_unknown_key_is_refused_with_the_known_keys(tmp_path: Path) -> None:
    folder = write_agent(tmp_path / "a", "name: a\nmodle: openai/gpt-4o")
    with pytest.raises(AgentFileError) as caught:
        load_spec(folder)
    assert caught.value.line == 3
    assert caught.value.reason == (
        "unknown key 'modle'; the keys are: name, description, model, skills, access, compaction"
    )
    assert str(caught.value) == f"{folder.resolve() / 'AGENT.md'}:3: {caught.value.reason}"
    assert KNOWN_KEYS == ("name", "description", "model", "skills", "access", "compaction")


def test_r1_yaml_error_names_the_file_and_line(tmp_path: Path) -> None:
    folder = write_agent(tmp_path / "a", "name: a\nskills:\n  - openai\n  bad: [unclosed")
    with pytest.raises(AgentFileError) as caught:
        load_spec(folder)
    assert caught.value.file == (folder / "AGENT.md").resolve()
    assert caught.value.line == 5
    assert caught.value.reason.startswith("YAML error in the front matter: ")


def test_r1_unclosed_front_matter_is_reported(tmp_path: Path) -> None:
    folder = tmp_path / "a"
    folder.mkdir()
    (folder / "AGENT.md").write_text("---\nname: a\nBe brief.\n", encoding="utf-8")
    with pytest.raises(AgentFileError, match=r"AGENT.md:1: the front matter opened on line 1"):
        load_spec(folder)


def test_r1_front_matter_must_be_a_mapping(tmp_path: Path) -> None:
    folder = write_agent(tmp_path / "a", "- just\n- a list")
    with pytest.raises(AgentFileError, match="the front matter must be a mapping"):
        load_spec(folder)


@pytest.mark.parametrize("model", ["gpt-4o", "anthropic/claude", "openai/", 3])
def test_r1_model_must_be_openai_slash_name(tmp_path: Path, model: object) -> None:
    folder = write_agent(tmp_path / "a", f"model: {model}")
    with pytest.raises(
        AgentFileError, match=r":2: model .* is not supported: write openai/<model>"
    ):
        load_spec(folder)


@pytest.mark.parametrize("name", ["has space", "../up", "-dash", "x" * 65])
def test_r1_agent_names_are_slugs(tmp_path: Path, name: str) -> None:
    folder = write_agent(tmp_path / "a", f"name: '{name}'")
    with pytest.raises(AgentFileError, match="set name: in the front matter"):
        load_spec(folder)


def test_r1_missing_folder_and_missing_file_are_told_apart(tmp_path: Path) -> None:
    with pytest.raises(AgentFileError, match="there is no such folder"):
        load_spec(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(AgentFileError, match=r"there is no AGENT\.md here"):
        load_spec(tmp_path / "empty")


def test_r2_unknown_skill_is_refused_with_the_skills(tmp_path: Path) -> None:
    folder = write_agent(tmp_path / "a", "skills:\n  - openai\n  - memroy")
    with pytest.raises(AgentFileError) as caught:
        load_spec(folder)
    assert (caught.value.line, caught.value.reason) == (
        4,
        "unknown skill 'memroy'; the skills are: auth, mcp, memory, openai, session "
        "(or a skill of your own as package.module:ClassName)",
    )


def test_r2_unknown_setting_is_refused_with_the_settings_it_takes(tmp_path: Path) -> None:
    folder = write_agent(tmp_path / "a", "skills:\n  - openai: {temprature: 1}")
    with pytest.raises(AgentFileError) as caught:
        load_spec(folder)
    assert (caught.value.line, caught.value.reason) == (
        3,
        "skill 'openai': unknown setting 'temprature'; "
        "it takes: model, base_url, api_key, temperature, max_tokens",
    )


def test_r2_a_wrong_setting_value_is_refused(tmp_path: Path) -> None:
    folder = write_agent(tmp_path / "a", "skills:\n  - openai: {temperature: hot}")
    with pytest.raises(AgentFileError, match=r"skill 'openai': setting 'temperature': .*number"):
        load_spec(folder)


@pytest.mark.parametrize(
    ("skills", "message"),
    [
        ("skills: openai", "skills must be a list"),
        ("skills:\n  - {openai: {}, memory: {}}", "each skill is a name"),
        ("skills:\n  - openai\n  - openai", "skill 'openai' is listed twice"),
        ("skills:\n  - openai: [1, 2]", "settings must be a mapping"),
    ],
)
def test_r2_malformed_skill_entries(tmp_path: Path, skills: str, message: str) -> None:
    folder = write_agent(tmp_path / "a", skills)
    with pytest.raises(AgentFileError, match=message):
        load_spec(folder)


def test_a5_plaintext_secrets_are_refused(tmp_path: Path) -> None:
    folder = write_agent(tmp_path / "a", "access:\n  owner: hunter2")
    with pytest.raises(AgentFileError) as caught:
        load_spec(folder)
    assert caught.value.line == 2
    assert caught.value.reason == (
        "access.owner: must be env:NAME (read from the environment) or sha256:<64 hex digits> "
        "(the key's SHA-256 digest); a plaintext secret does not belong in AGENT.md"
    )


def test_a5_plaintext_api_key_for_the_model_is_refused(tmp_path: Path) -> None:
    folder = write_agent(tmp_path / "a", "skills:\n  - openai: {api_key: sk-live-123}")
    with pytest.raises(AgentFileError, match="api_key must be env:NAME"):
        load_spec(folder)


def test_a6_access_block_is_read(tmp_path: Path) -> None:
    digest = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"
    folder = write_agent(
        tmp_path / "a",
        f"""
access:
  owner: env:HELPER_OWNER_KEY
  keys:
    alice@example.com: env:ALICE_KEY
    bob@example.com: sha256:{digest}
  jwt:
    - issuer: https://id.example.com
      jwks: https://id.example.com/.well-known/jwks.json
      audience: helper
      identity: [email, sub]
  channels:
    telegram: env:TELEGRAM_BRIDGE_KEY
""",
    )
    access = load_spec(folder).access
    assert access is not None
    assert access.owner == "env:HELPER_OWNER_KEY"
    assert access.keys == {
        "alice@example.com": "env:ALICE_KEY",
        "bob@example.com": f"sha256:{digest}",
    }
    assert [(j.issuer, j.audience, j.identity) for j in access.jwt] == [
        ("https://id.example.com", "helper", ["email", "sub"])
    ]
    assert access.channels == {"telegram": "env:TELEGRAM_BRIDGE_KEY"}


def test_a6_jwt_algorithm_none_and_shared_secrets_are_refused(tmp_path: Path) -> None:
    folder = write_agent(
        tmp_path / "a",
        "access:\n  jwt:\n    - {issuer: i, jwks: j, audience: a, algorithms: [none]}",
    )
    with pytest.raises(AgentFileError, match="only asymmetric algorithms"):
        load_spec(folder)


def test_c1_compaction_block_is_validated(tmp_path: Path) -> None:
    ok = load_spec(write_agent(tmp_path / "a", "compaction: {threshold: 8000, keep: 2000 tokens}"))
    assert ok.compaction is not None
    assert (ok.compaction.threshold, ok.compaction.keep) == (8000, "2000 tokens")
    with pytest.raises(AgentFileError) as caught:
        load_spec(write_agent(tmp_path / "b", "compaction: {threshold: 8000, kept: 4}"))
    assert caught.value.reason == (
        "unknown setting compaction.kept "
        "(the compaction block takes: threshold, keep, model, instructions)"
    )
    with pytest.raises(AgentFileError, match="keep must be a number of messages"):
        load_spec(write_agent(tmp_path / "c", "compaction: {threshold: 10, keep: lots}"))


def test_r3_model_line_alone_brings_the_openai_skill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write_agent(tmp_path / "a", "model: openai/gpt-4o-mini")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    agent = load_agent(folder)
    assert [s.name for s in agent.skills] == ["openai"]
    model = agent.model
    assert isinstance(model, OpenAIModel)
    assert (model.name, model.base_url) == ("gpt-4o-mini", "http://127.0.0.1:9/v1")


def test_r3_no_key_and_no_base_url_says_what_to_set(tmp_path: Path) -> None:
    agent = load_agent(write_agent(tmp_path / "a", "model: openai/gpt-4o-mini"))
    with pytest.raises(ConfigError) as caught:
        agent.model  # noqa: B018
    assert str(caught.value) == (
        "no model endpoint is configured: set OPENAI_API_KEY (for OpenAI) or OPENAI_BASE_URL "
        "(for a compatible server such as vLLM, Ollama or llama.cpp)"
    )


def test_r3_an_agent_without_a_model_says_how_to_name_one(tmp_path: Path) -> None:
    agent = load_agent(write_agent(tmp_path / "a", "description: no model"))
    with pytest.raises(ConfigError, match=r"has no model: add `model: openai/<model>`"):
        agent.model  # noqa: B018


def test_r3_skill_and_agent_model_must_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    folder = write_agent(tmp_path / "a", "model: openai/a\nskills:\n  - openai: {model: b}")
    with pytest.raises(ConfigError, match="keep one of them"):
        load_agent(folder).model  # noqa: B018
    same = write_agent(tmp_path / "b", "skills:\n  - openai: {model: openai/b}")
    assert load_agent(same).model.name == "b"


def test_r3_api_key_setting_reads_the_named_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write_agent(
        tmp_path / "a", "model: openai/m\nskills:\n  - openai: {api_key: env:MY_MODEL_KEY}"
    )
    with pytest.raises(
        ConfigError, match="names the environment variable MY_MODEL_KEY, which is not set"
    ):
        load_agent(folder).model  # noqa: B018
    monkeypatch.setenv("MY_MODEL_KEY", "sk-from-env")
    assert load_agent(folder).model.name == "m"


def test_r4_a_given_model_replaces_the_files(tmp_path: Path) -> None:
    model = ScriptedModel(["hi"])
    agent = load_agent(write_agent(tmp_path / "a", "model: openai/gpt-4o-mini"), model=model)
    assert agent.model is model
    assert agent.run_sync("hello").output == "hi"


def test_r1_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    folder = write_agent(tmp_path / "a", "name: a\nmodel: openai/m\nname: b")
    with pytest.raises(AgentFileError) as caught:
        load_spec(folder)
    assert (caught.value.line, caught.value.reason) == (
        4,
        "YAML error in the front matter: the key 'name' is given twice",
    )
    nested = write_agent(tmp_path / "n", "skills:\n  - openai: {temperature: 1, temperature: 2}")
    with pytest.raises(AgentFileError, match="the key 'temperature' is given twice"):
        load_spec(nested)


def test_r1_a_byte_order_mark_is_not_a_way_around_the_front_matter(tmp_path: Path) -> None:
    folder = tmp_path / "bom"
    folder.mkdir()
    (folder / "AGENT.md").write_text("\ufeff---\nmodle: x\n---\nHi.\n", encoding="utf-8")
    with pytest.raises(AgentFileError, match="unknown key 'modle'"):
        load_spec(folder)
    late = tmp_path / "late"
    late.mkdir()
    (late / "AGENT.md").write_text("\n\n---\nname: late\n---\nHi.\n", encoding="utf-8")
    with pytest.raises(AgentFileError) as caught:
        load_spec(late)
    assert (caught.value.line, caught.value.reason) == (
        3,
        "the front matter must start on the first line: remove the lines above ---",
    )


def test_r1_an_agent_folder_reached_by_a_symlink_keeps_its_name(tmp_path: Path) -> None:
    real = write_agent(tmp_path / "real-folder", "description: linked")
    (tmp_path / "linked").symlink_to(real)
    spec = load_spec(tmp_path / "linked")
    assert (spec.name, spec.directory) == ("linked", tmp_path / "linked")


@pytest.mark.parametrize("api_key", ["env:", "env:sk-abc-123", "env:$HOME"])
def test_a5_api_key_must_name_a_variable(tmp_path: Path, api_key: str) -> None:
    folder = write_agent(tmp_path / "a", f"skills:\n  - openai: {{api_key: '{api_key}'}}")
    with pytest.raises(AgentFileError) as caught:
        load_spec(folder)
    assert "api_key must be env:NAME" in caught.value.reason
    assert (
        api_key.removeprefix("env:") not in caught.value.reason.replace("env:NAME", "")
        or api_key == "env:"
    )


@pytest.mark.parametrize("front", ["? [a]\n: 1", "x: " + "[" * 5000 + "]" * 5000])
def test_r1_front_matter_python_cannot_hold_is_an_agent_file_error(
    tmp_path: Path, front: str
) -> None:
    with pytest.raises(AgentFileError, match=r"the front matter cannot be read|YAML error"):
        load_spec(write_agent(tmp_path / "a", front))


def test_c1_memory_legacy_compaction_takes_threshold_and_keep(tmp_path: Path) -> None:
    """C1: the memory skill's legacy `compaction` setting, as a number or as {threshold, keep}."""
    from webagents.compaction import Compaction

    def loaded(setting: str, name: str) -> Compaction | None:
        folder = write_agent(tmp_path / name, f"skills:\n  - memory: {{compaction: {setting}}}")
        return load_agent(folder, model=ScriptedModel()).compaction

    assert [
        loaded("5000", "a"),
        loaded("{threshold: 900, keep: 4}", "b"),
        loaded("{threshold: 900, keep: 300 tokens}", "c"),
        loaded("{threshold: 900}", "d"),
    ] == [
        Compaction(5000),
        Compaction(900, keep_messages=4),
        Compaction(900, keep_messages=None, keep_tokens=300),
        Compaction(900),
    ]
    refusals = {}
    for name, setting in {
        "e": "{threshold: 900, kep: 4}",
        "f": "{keep: 4}",
        "g": "{threshold: 900, keep: lots}",
        "h": "0",
        "i": "lots",
    }.items():
        with pytest.raises(AgentFileError) as caught:
            loaded(setting, name)
        refusals[setting] = caught.value.reason
    either = (
        "skill 'memory': setting 'compaction': give a number of prompt tokens (more than 0), "
        "or {threshold, keep} as in the compaction: block"
    )
    assert refusals == {
        "{threshold: 900, kep: 4}": "skill 'memory': setting 'compaction': unknown key 'kep' "
        "(it takes: threshold, keep, model, instructions)",
        "{keep: 4}": "skill 'memory': setting 'compaction': threshold: Field required",
        "{threshold: 900, keep: lots}": "skill 'memory': setting 'compaction': keep: keep must "
        "be a number of messages, or 'N messages' or 'N tokens'",
        "0": either,
        "lots": either,
    }
