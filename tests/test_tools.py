"""R4: tools from typed functions; the schema comes from the signature and the docstring."""

from __future__ import annotations

from typing import Literal

import pytest

from webagents import Caller, Context, tool
from webagents.context import AgentInfo
from webagents.errors import ToolError
from webagents.skills.base import Skill, Tool


def _ctx() -> Context:
    return Context(agent=AgentInfo("t"), caller=Caller.owner())


async def lookup(
    ctx: Context, city: str, units: Literal["c", "f"] = "c", days: int = 1
) -> dict[str, object]:
    """Look up the weather.

    A second paragraph that is not part of the description.

    Args:
        city: the city's name,
            as people write it
        units: c or f
    """
    return {"city": city, "units": units, "days": days, "caller": ctx.caller.describe()}


def test_r4_schema_from_signature_and_docstring() -> None:
    made = Tool.from_function(lookup)
    assert made.schema() == {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look up the weather.",
            "parameters": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "city": {
                        "type": "string",
                        "description": "the city's name, as people write it",
                    },
                    "units": {
                        "type": "string",
                        "enum": ["c", "f"],
                        "default": "c",
                        "description": "c or f",
                    },
                    "days": {"type": "integer", "default": 1},
                },
                "required": ["city"],
            },
        },
    }


async def test_r4_context_is_injected_and_results_become_json() -> None:
    made = Tool.from_function(lookup)
    assert await made(_ctx(), {"city": "Oslo", "days": 2}) == (
        '{"city":"Oslo","units":"c","days":2,"caller":"owner"}'
    )


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({}, "invalid arguments: city: Field required"),
        (
            {"city": "Oslo", "namespace": "shared"},
            "invalid arguments: namespace: this tool takes no such argument",
        ),
        ({"city": "Oslo", "units": "k"}, "invalid arguments: units: Input should be 'c' or 'f'"),
    ],
)
async def test_r4_arguments_are_validated_before_the_call(
    arguments: dict[str, object], problem: str
) -> None:
    with pytest.raises(ToolError) as caught:
        await Tool.from_function(lookup)(_ctx(), arguments)
    assert str(caught.value) == problem


async def test_r4_sync_functions_and_decorator_options() -> None:
    @tool(name="shout", description="Upper-case text.")
    def loud(text: str) -> str:
        return text.upper()

    class Echo(Skill):  # type: ignore[type-arg]
        name = "echo"

        @tool
        async def echo(self, text: str) -> str:
            """Say it back."""
            return text

        @tool(name="loud")
        def _loud(self, text: str) -> str:
            return text.upper()

    skill = Echo()
    tools = {t.name: t for t in skill.tools(_ctx())}
    assert sorted(tools) == ["echo", "loud"]
    assert await tools["echo"](_ctx(), {"text": "hi"}) == "hi"
    assert await tools["loud"](_ctx(), {"text": "hi"}) == "HI"
    from webagents.skills.base import as_tool

    made = as_tool(loud)
    assert (made.name, made.description) == ("shout", "Upper-case text.")
    assert await made(_ctx(), {"text": "a"}) == "A"


def test_r4_tool_names_and_signatures_are_checked() -> None:
    def bad_name() -> None: ...

    with pytest.raises(ValueError, match="tool name 'has space'"):
        Tool.from_function(bad_name, name="has space")

    def varargs(*items: str) -> None: ...

    with pytest.raises(TypeError, match=r"\*args and \*\*kwargs cannot be described"):
        Tool.from_function(varargs)
