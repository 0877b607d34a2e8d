"""Scoping by construction (issue 22): every query of the portal is in a scoped repository,
a `SystemScope` job's, or a named pre-authentication lookup, found by reading the source.

A query is a call of SQLAlchemy's select/update/delete/insert/text (as the module imported
them), a dialect's insert, or a session's get/delete. Its place is allowed when the class
around it is made from a scope (its body calls require_scope, require_agent_scope or
require_system_scope) or is a `PreAuthLookup`; or when its module is not tenant data's
(migrations) or only builds statements that scoped repositories run (the dialect module,
full-text search's SQL, which only `MemoryStore` runs with its own agent bound).
"""

from __future__ import annotations

import ast
import uuid
from pathlib import Path
from typing import cast

import pytest
from sqlalchemy.orm import Session, sessionmaker

import webagents.portal
from webagents.portal.connect.directory import Directory
from webagents.portal.memory.across_agents import AcrossAgents
from webagents.portal.memory.repository import MemoryStore
from webagents.portal.scope import SystemScope

PORTAL = Path(webagents.portal.__file__).parent
STATEMENTS = {"select", "update", "delete", "insert", "text"}
SESSIONS = {"db", "session", "_session"}
SESSION_CALLS = {"get", "get_one", "delete"}
MAKERS = {"require_scope", "require_agent_scope", "require_system_scope"}
PREAUTH_BASE = "PreAuthLookup"
# Modules whose SQL is not a query of tenant data, or is only run by a scoped repository.
NOT_TENANT_QUERIES = {
    "db/migrate.py",  # the schema itself
    "db/pgvector.py",  # the schema too: the extension, column and indexes, the column filled
    "db/dialect.py",  # SQLite's and PostgreSQL's forms of one statement, run by repositories
    "memory/search.py",  # full-text SQL: only MemoryStore.run runs it, its agent bound
    "memory/vector_cache.py",  # its reads: only MemoryStore.run runs them, its agent bound
    "memory/vector_index.py",  # pgvector's ranking: only MemoryStore.run runs it, as above
}


def _sqlalchemy_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy"):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _receiver(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_query(call: ast.Call, sqlalchemy: set[str]) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in STATEMENTS and func.id in sqlalchemy
    if isinstance(func, ast.Attribute):
        owner = _receiver(func.value)
        if func.attr in STATEMENTS and owner in sqlalchemy and owner in {"postgresql", "sqlite"}:
            return True
        return func.attr in SESSION_CALLS and owner in SESSIONS
    return False


def _is_repository(cls: ast.ClassDef) -> bool:
    if any(_receiver(base) == PREAUTH_BASE for base in cls.bases):
        return True
    return any(
        isinstance(node, ast.Call) and _receiver(node.func) in MAKERS for node in ast.walk(cls)
    )


def unscoped_queries(source: str, name: str) -> list[str]:
    """Each query of `source` outside a scoped repository or a pre-authentication lookup,
    as 'name:line'."""
    tree = ast.parse(source)
    sqlalchemy = _sqlalchemy_names(tree)
    found: list[str] = []

    def visit(node: ast.AST, allowed: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = allowed or (isinstance(child, ast.ClassDef) and _is_repository(child))
            if isinstance(child, ast.Call) and not inside and _is_query(child, sqlalchemy):
                found.append(f"{name}:{child.lineno}")
            visit(child, inside)

    visit(tree, False)
    return found


def _portal_modules() -> list[Path]:
    return sorted(
        path
        for path in PORTAL.rglob("*.py")
        if "migrations" not in path.relative_to(PORTAL).parts
        and path.relative_to(PORTAL).as_posix() not in NOT_TENANT_QUERIES
    )


def test_issue22_every_portal_query_is_in_a_scoped_repository() -> None:
    unscoped = [
        where
        for path in _portal_modules()
        for where in unscoped_queries(path.read_text(), path.relative_to(PORTAL).as_posix())
    ]
    assert unscoped == []


def test_issue22_scoping_check_finds_an_unscoped_query() -> None:
    source = """
from sqlalchemy import select, text
from ..scope import require_scope, PreAuthLookup

def everyone(db):
    return db.scalars(select(User))

class Agents:
    def __init__(self, session, scope):
        self._session = session
        self._scope = require_scope(scope)

    def mine(self):
        return self._session.scalars(select(Agent).where(Agent.user_id == self._scope.user_id))

class ByName(PreAuthLookup):
    def user(self, name):
        return self._session.scalar(select(User).where(User.username == name))

class Loose:
    def user(self, session, user_id):
        return session.get(User, user_id)

def raw(db):
    return db.execute(text("SELECT * FROM memory_entries"))
"""
    assert unscoped_queries(source, "fixture.py") == [
        "fixture.py:6",
        "fixture.py:22",
        "fixture.py:25",
    ]


def test_issue22_scoping_check_reads_every_portal_module() -> None:
    """The walk reaches the repositories themselves (a wrong root would pass vacuously)."""
    names = {path.relative_to(PORTAL).as_posix() for path in _portal_modules()}
    assert {"memory/repository.py", "accounts/repository.py", "agents/repository.py"} <= names


def test_issue22_background_repositories_refuse_to_be_made_without_a_system_scope() -> None:
    """A job's repository is made only from a SystemScope; an id or a name is refused before
    any query (no database is needed to see it)."""
    session = cast(Session, None)
    with pytest.raises(TypeError, match="needs a SystemScope, not str"):
        AcrossAgents(session, cast(SystemScope, "embedding worker"))
    with pytest.raises(TypeError, match="needs a SystemScope, not UUID"):
        MemoryStore.for_system(session, cast(SystemScope, uuid.uuid4()), uuid.uuid4())
    with pytest.raises(TypeError, match="needs a SystemScope, not NoneType"):
        Directory(cast(sessionmaker[Session], None), uuid.uuid4(), cast(SystemScope, None))
