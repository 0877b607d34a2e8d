"""The memory tools as each kind of caller sees them (M3, M4): their names, schemas and
descriptions, and the refusal of a `namespace` from a caller whose tools have none.

The owner's carry an optional `namespace`; everyone else's are the same tools with that
parameter taken out of the schema and refused if sent anyway. A caller who may write nothing
gets neither memory_write nor memory_forget. What a tool does is the skill's (`MemoryActions`).
"""

from __future__ import annotations

import json
from typing import Any, Literal, Protocol

from ...context import Context
from ...errors import ToolError
from ..base import Tool

WriteTarget = Literal["owner", "shared"]


class MemoryActions(Protocol):
    """What the tools call: the memory skill's methods of the same names."""

    async def search(self, ctx: Context, query: str, namespace: str | None = None) -> Any: ...

    async def read(self, ctx: Context, key: str, namespace: str | None = None) -> Any: ...

    async def write(
        self,
        ctx: Context,
        key: str,
        content: str,
        description: str = "",
        namespace: str | None = None,
    ) -> Any: ...

    async def forget(self, ctx: Context, key: str, namespace: str | None = None) -> Any: ...

    async def list(self, ctx: Context, namespace: str | None = None) -> Any: ...


def toolset(skill: MemoryActions, kind: str) -> list[Tool]:
    """The memory tools as one kind of caller sees them: `owner`, `writer` or `reader`."""

    async def memory_search(ctx: Context, query: str, namespace: str | None = None) -> Any:
        """Search the notes and earlier-conversation summaries you may read.

        Args:
            query: words to look for
            namespace: only this namespace (owner, shared or caller:<identity>)
        """
        return await skill.search(ctx, query, namespace)

    async def memory_read(ctx: Context, key: str, namespace: str | None = None) -> Any:
        """Read one note in full: its content, description and when it changed.

        Args:
            key: the note's key (yours first, then the shared one)
            namespace: read from this namespace instead
        """
        return await skill.read(ctx, key, namespace)

    async def memory_write(
        ctx: Context,
        key: str,
        content: str,
        description: str = "",
        namespace: WriteTarget | None = None,
    ) -> Any:
        """Save or replace a note by key, with a one-line description.

        Args:
            key: a short slug such as preferences or launch-plan
            content: the note, in Markdown
            description: one line saying what the note is about
            namespace: owner (yours, the default) or shared (every caller reads it)
        """
        return await skill.write(ctx, key, content, description, namespace)

    async def memory_forget(ctx: Context, key: str, namespace: WriteTarget | None = None) -> Any:
        """Remove a note.

        Args:
            key: the note's key
            namespace: owner (yours, the default) or shared
        """
        return await skill.forget(ctx, key, namespace)

    async def memory_list(ctx: Context, namespace: str | None = None) -> Any:
        """List the notes you may read, with their descriptions, newest first.

        Args:
            namespace: only this namespace (owner, shared or caller:<identity>)
        """
        return await skill.list(ctx, namespace)

    functions: list[Any] = [memory_search, memory_read, memory_list]
    if kind != "reader":
        functions[2:2] = [memory_write, memory_forget]
    tools = [Tool.from_function(fn) for fn in functions]
    return tools if kind == "owner" else [_without_namespace(tool) for tool in tools]


def _without_namespace(tool: Tool) -> Tool:
    """The tool as a caller other than the owner sees it: no `namespace` to give."""
    parameters = json.loads(json.dumps(tool.parameters))
    parameters["properties"].pop("namespace", None)
    handler = tool.handler

    async def refuse_namespace(ctx: Context, arguments: dict[str, Any]) -> Any:
        if "namespace" in arguments:
            raise ToolError("invalid arguments: namespace: this tool takes no such argument")
        return await handler(ctx, arguments)

    return Tool(tool.name, tool.description, parameters, refuse_namespace)
