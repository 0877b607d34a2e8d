"""An agent's `skills` on the portal (P4, portal/agents/skills_field.py): the platform SDK's
mapping of skill name to settings and our CLI's list are both taken by `POST /api/agents` and
`PATCH /api/agents/{id}`, kept and answered in the shape sent; any other shape is a 400 that
says which shapes are taken, and nothing is kept."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from webagents.portal.accounts import service as accounts
from webagents.portal.db.tables import Agent

from .conftest import make_account

SDK_SKILLS = {"memory": {"portal": True}, "openai": {}}
CLI_SKILLS = ["memory", {"session": {"backend": "robutler"}}]
SHAPES = (
    'skills is a list as in AGENT.md (["memory", {"session": {"backend": "robutler"}}]) or a '
    'mapping of skill name to its settings ({"memory": {"portal": true}, "openai": {}})'
)
NAME_RULE = "1-200 characters of A-Z a-z 0-9 . _ - / :, starting with a letter or digit"


def _bearer(db: Session, username: str = "alice") -> dict[str, str]:
    scope = make_account(db, username)
    return {"Authorization": f"Bearer {accounts.create_key(db, scope, 'cli').key}"}


def _sent(client: TestClient, method: str, path: str, headers: dict[str, str], body: Any) -> Any:
    """The body as JSON text, NaN included (as Python's json writes it and the platform's
    clients may send it; httpx's json= refuses to)."""
    return client.request(
        method,
        path,
        headers={**headers, "Content-Type": "application/json"},
        content=json.dumps(body),
    )


def _refusal(message: str, code: str = "bad_skills") -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": None,
            "code": code,
        }
    }


def test_p4_agents_accept_the_platform_sdks_skills_mapping_and_answer_it_as_sent(
    client: TestClient, db: Session
) -> None:
    alice = _bearer(db)
    created = client.post(
        "/api/agents", headers=alice, json={"name": "helper", "skills": SDK_SKILLS}
    )
    assert created.status_code == 201, created.text
    agent = created.json()["agent"]
    assert agent["skills"] == SDK_SKILLS
    assert client.get(f"/api/agents/{agent['id']}", headers=alice).json() == {"agent": agent}
    assert client.get("/api/agents", headers=alice).json() == {"agents": [agent]}
    assert db.scalars(select(Agent.skills)).one() == SDK_SKILLS

    # The same agent published again by our CLI (a list), then by the SDK (a mapping).
    as_list = client.patch(f"/api/agents/{agent['id']}", headers=alice, json={"skills": CLI_SKILLS})
    assert (as_list.status_code, as_list.json()["agent"]["skills"]) == (200, CLI_SKILLS)
    mapping = {"memory": {"portal": True, "notes_budget": 2000}}
    as_map = client.patch(f"/api/agents/{agent['id']}", headers=alice, json={"skills": mapping})
    assert (as_map.status_code, as_map.json()["agent"]["skills"]) == (200, mapping)
    empty = client.patch(f"/api/agents/{agent['id']}", headers=alice, json={"skills": {}})
    assert empty.json()["agent"]["skills"] == {}


def test_p4_agents_keep_our_clis_skills_list_as_it_was(client: TestClient, db: Session) -> None:
    alice = _bearer(db)
    created = client.post(
        "/api/agents", headers=alice, json={"name": "helper", "skills": CLI_SKILLS}
    )
    assert created.json()["agent"]["skills"] == CLI_SKILLS
    plain = client.post("/api/agents", headers=alice, json={"name": "plain"})
    assert plain.json()["agent"]["skills"] == []


def test_p4_agents_keep_a_skill_of_the_owners_own_named_by_its_import_path(
    client: TestClient, db: Session
) -> None:
    """R2: an agent file names a skill of its own as package.module:ClassName; publishing
    such an agent keeps it, in either shape."""
    alice = _bearer(db)
    own = ["memory", {"my_skills.weather:Forecast": {"units": "metric"}}]
    created = client.post("/api/agents", headers=alice, json={"name": "helper", "skills": own})
    assert (created.status_code, created.json()["agent"]["skills"]) == (201, own), created.text
    mapping = {"my_skills.weather:Forecast": {}}
    patched = client.patch(
        f"/api/agents/{created.json()['agent']['id']}", headers=alice, json={"skills": mapping}
    )
    assert (patched.status_code, patched.json()["agent"]["skills"]) == (200, mapping)
    assert db.scalars(select(Agent.skills)).one() == mapping


BAD_SKILLS: list[tuple[Any, str]] = [
    ("memory", f"skills is a string: {SHAPES}"),
    (7, f"skills is a number: {SHAPES}"),
    (
        {"memory": True},
        f"skills.memory is a boolean, not an object of settings ({{}} for none): {SHAPES}",
    ),
    (
        {"memory": None},
        f"skills.memory is null, not an object of settings ({{}} for none): {SHAPES}",
    ),
    (
        {"memory": ["portal"]},
        f"skills.memory is a list, not an object of settings ({{}} for none): {SHAPES}",
    ),
    ({"": {}}, f"skills names a skill '', but a skill's name is {NAME_RULE}: {SHAPES}"),
    (
        {"my skill": {}},
        f"skills names a skill 'my skill', but a skill's name is {NAME_RULE}: {SHAPES}",
    ),
    ([7], f"skills[0] is a number, not a skill's name or a one-key object: {SHAPES}"),
    ([None], f"skills[0] is null, not a skill's name or a one-key object: {SHAPES}"),
    (
        ["memory", ["openai"]],
        f"skills[1] is a list, not a skill's name or a one-key object: {SHAPES}",
    ),
    (
        [{"memory": {}, "openai": {}}],
        f"skills[0] is an object of 2 keys, not one skill's: {SHAPES}",
    ),
    ([{}], f"skills[0] is an object of 0 keys, not one skill's: {SHAPES}"),
    (
        [{"memory": "portal"}],
        f"skills[0].memory is a string, not an object of settings ({{}} for none): {SHAPES}",
    ),
    (["../x"], f"skills[0] names a skill '../x', but a skill's name is {NAME_RULE}: {SHAPES}"),
    (["memory", {"memory": {}}], "skills[1] names the skill 'memory' again: list each skill once"),
    (
        {
            "memory": {
                "a": {
                    "b": {
                        "c": {
                            "d": {
                                "e": {
                                    "f": {
                                        "g": {
                                            "h": {
                                                "i": {
                                                    "j": {"k": {"l": {"m": {"n": {"o": {"p": 1}}}}}}
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        },
        "skills.memory.a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p is nested more than 16 levels deep: "
        "flatten the skill's settings",
    ),
    (
        [f"s{n}" for n in range(101)],
        "skills names 101 skills, over the 100 an agent may have",
    ),
    (
        {"memory": {"text": "x" * 70_000}},
        "skills is 70,024 bytes as JSON, over 65,536: keep large settings out of the agent's "
        "skills",
    ),
]


# NaN is refused for every body before any route reads it (portal/json_body.py).
NOT_JSON_SKILLS: list[tuple[Any, str]] = [
    (
        {"memory": {"budget": float("nan")}},
        "the request body holds NaN, Infinity or a number past a double's range, which the "
        "portal cannot keep: send a finite number, or null for none",
    ),
]


UNSTORABLE_SKILLS: list[tuple[Any, str]] = [
    (
        {"memory": {"note": "a\x00b"}},
        "skills.memory.note holds a NUL character (U+0000), which the portal cannot keep: "
        "remove it or replace it (with U+FFFD, say) and send the call again",
    ),
    (
        {"memory": {"note": "a\ud800b"}},
        "skills.memory.note holds half of a UTF-16 surrogate pair, which is not text: send "
        "valid Unicode",
    ),
    (
        ["memory", {"x\ud800": {}}],
        f"skills[1] names a skill 'x\\ud800', but a skill's name is {NAME_RULE}: {SHAPES}",
    ),
]


@pytest.mark.parametrize(
    ("skills", "message", "code"),
    [(skills, message, "bad_skills") for skills, message in BAD_SKILLS]
    + [(skills, message, "unstorable_text") for skills, message in UNSTORABLE_SKILLS[:2]]
    + [(skills, message, "bad_skills") for skills, message in UNSTORABLE_SKILLS[2:]]
    + [(skills, message, "bad_json") for skills, message in NOT_JSON_SKILLS],
)
def test_p4_agents_refuse_a_bad_skills_shape_with_the_shapes_taken_and_keep_nothing(
    client: TestClient, db: Session, skills: Any, message: str, code: str
) -> None:
    alice = _bearer(db)
    made = client.post("/api/agents", headers=alice, json={"name": "helper", "skills": ["memory"]})
    agent_id = made.json()["agent"]["id"]
    created = _sent(client, "POST", "/api/agents", alice, {"name": "other", "skills": skills})
    assert (created.status_code, created.json()) == (400, _refusal(message, code))
    patched = _sent(client, "PATCH", f"/api/agents/{agent_id}", alice, {"skills": skills})
    assert (patched.status_code, patched.json()) == (400, _refusal(message, code))
    assert db.execute(select(Agent.name, Agent.skills)).all() == [("helper", ["memory"])]


def test_p4_agents_refuse_null_skills_in_a_patch(client: TestClient, db: Session) -> None:
    alice = _bearer(db)
    agent_id = client.post("/api/agents", headers=alice, json={"name": "helper"}).json()["agent"][
        "id"
    ]
    patched = client.patch(f"/api/agents/{agent_id}", headers=alice, json={"skills": None})
    assert (patched.status_code, patched.json()["error"]["message"]) == (
        400,
        "skills cannot be null: send a list or a mapping ([] or {} for none), or leave skills "
        "out to keep it as it is",
    )
