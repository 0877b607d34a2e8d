"""What a `webagents` process imports when it starts: the package's public names, the
agent's server and the built-in skills are loaded when asked for, not by every process
(issue 22: the tests start hundreds of processes, and each paid for the agent runtime, the
MCP SDK and PyJWT whether it used them or not).

Each check runs in a fresh interpreter, where nothing is imported yet."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import webagents


def loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running `code`."""
    script = textwrap.dedent(code) + "\nimport sys\nprint('\\n'.join(sorted(sys.modules)))\n"
    ran = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert ran.returncode == 0, ran.stderr
    return set(ran.stdout.split())


def test_package_every_public_name_resolves() -> None:
    for name in webagents.__all__:
        assert getattr(webagents, name) is not None, name
    assert webagents.Agent.__module__ == "webagents.agent"
    assert webagents.tool.__module__ == "webagents.skills.base"
    assert set(webagents.__all__) <= set(dir(webagents))


def test_package_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'webagents' has no attribute 'Agnet'"):
        webagents.Agnet  # type: ignore[attr-defined]  # noqa: B018


def test_package_the_cli_and_the_portal_load_no_agent_runtime() -> None:
    """`webagents portal serve` and every command's start load neither the agent, its
    server (the MCP SDK) nor a skill."""
    loaded = loaded_after("import webagents.cli, webagents.cli.portal_serve, webagents.portal.app")
    assert {"webagents.agent", "webagents.server.app", "mcp", "webagents.skills.base"}.isdisjoint(
        loaded
    ), sorted(m for m in loaded if m.startswith(("webagents.agent", "webagents.skills", "mcp")))


def test_package_portal_serve_loads_no_agent_serving() -> None:
    """`webagents portal serve` shares the servers' plumbing (cli/serving.py) with `serve`,
    not serve.py: none of the agent's model client, Portal Connect's agent side or httpx
    (which loads its own command line, rich and pygments, when rich is installed)."""
    loaded = loaded_after(
        "import webagents.cli.portal_serve, webagents.cli.serving, webagents.portal.app"
    )
    agent_serving = {
        "webagents.cli.serve",
        "webagents.chat_completions",
        "webagents.portal_link.connect",
        "webagents.offline",
        "httpx",
    }
    assert agent_serving.isdisjoint(loaded), sorted(agent_serving & loaded)


def test_package_from_webagents_import_loads_what_is_named() -> None:
    loaded = loaded_after("from webagents import Agent, load_agent, tool")
    assert {"webagents.agent", "webagents.agent_file", "webagents.skills.base"} <= loaded


def loading_agent(skills: list[str], refused: str = "") -> str:
    """Code that reads an agent file naming `skills`; `refused`: the AgentFileError it
    expects (a skill named without its settings), else none."""
    agent = "---\nname: a\nskills:\n" + "".join(f"  - {s}\n" for s in skills) + "---\nhi\n"
    return f"""
        import pathlib, tempfile
        from webagents import AgentFileError, load_agent
        folder = pathlib.Path(tempfile.mkdtemp())
        (folder / "AGENT.md").write_text({agent!r})
        try:
            load_agent(folder)
            assert not {refused!r}, "not refused"
        except AgentFileError as exc:
            assert {refused!r} and {refused!r} in str(exc), exc
        """


def test_registry_an_agent_file_loads_only_the_skills_it_names() -> None:
    """An agent with memory and session loads neither the mcp skill (the MCP SDK) nor the
    auth skill (PyJWT); one that names mcp loads it."""
    loaded = loaded_after(loading_agent(["memory", "session"]))
    assert {"webagents.skills.memory.skill", "webagents.skills.session.skill"} <= loaded
    assert {"webagents.skills.mcp", "mcp", "webagents.skills.auth", "jwt"}.isdisjoint(loaded)
    with_mcp = loaded_after(loading_agent(["mcp"], refused="skill 'mcp': setting 'servers'"))
    assert {"webagents.skills.mcp", "mcp"} <= with_mcp


def test_registry_an_unknown_skill_lists_every_built_in_one() -> None:
    loaded_after(
        loading_agent(["mem"], refused="the skills are: auth, mcp, memory, openai, session")
    )


def test_serve_the_agent_server_loads_the_mcp_sdk_only_for_an_mcp_request() -> None:
    """`webagents serve`'s app (Chat Completions, Responses, /mcp's route) is made without
    the MCP SDK, half of what the process imported; the first MCP request loads it."""
    loaded = loaded_after("import webagents.server.app, webagents.server.mcp_http")
    assert {"mcp", "mcp_types", "webagents.mcp_server", "webagents.server.mcp_sessions"}.isdisjoint(
        loaded
    ), sorted(m for m in loaded if "mcp" in m)


def test_portal_the_administrators_commands_load_no_web_framework() -> None:
    """`webagents portal adduser`, `apikey`, `passwd` and `migrate` (portal/admin.py) open the
    database without FastAPI, Starlette or the page templates: the request's dependencies
    are accounts/dependencies.py and db/requests.py, which only the app imports."""
    loaded = loaded_after("import webagents.portal.admin")
    assert {"webagents.portal.accounts.auth", "webagents.portal.db.engine"} <= loaded
    web = ("fastapi", "starlette", "jinja2", "webagents.portal.app")
    loaded_web = sorted(m for m in loaded if m.startswith(web))
    assert loaded_web == [], loaded_web


def test_portal_a_migrated_database_opens_without_alembic_or_numpy(tmp_path: Path) -> None:
    """Every portal command (serve, worker, adduser, apikey...) brings the database to head
    as it starts: on one already there, that is one read of its revision, not Alembic's
    import and tree (migrate.HEAD_REVISION); and the administrator's commands read no
    vectors, so they load no numpy either."""
    url = f"sqlite:///{tmp_path / 'portal.db'}"
    open_it = f"""
        from webagents.portal.admin import open_database
        from webagents.portal.settings import PortalSettings
        open_database(PortalSettings(database_url={url!r})).dispose()
    """
    first = loaded_after(open_it)  # an empty database: migrated, by Alembic
    assert "alembic" in first
    again = loaded_after(open_it)
    assert "webagents.portal.db.migrate" in again
    assert sorted(m for m in again if m.startswith(("alembic", "numpy", "mako"))) == []
