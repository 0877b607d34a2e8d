"""The offline model (`webagents chat --offline`, `serve --offline`): the memory phrases the
demo names make it call the memory tools."""

from __future__ import annotations

from webagents.model import ModelRequest
from webagents.offline import OFFLINE_MEMORY_HINT, OFFLINE_RECALL, OFFLINE_REMEMBER, OfflineModel


async def test_offline_model_the_memory_phrases_it_names_make_it_use_memory() -> None:
    assert OFFLINE_MEMORY_HINT == (
        'memory works offline too: say "remember that <something>", then "what do you '
        'remember" (also in a new conversation)'
    )
    tools = [
        {"type": "function", "function": {"name": name, "parameters": {}}}
        for name in ("memory_write", "memory_list")
    ]
    model = OfflineModel()
    said = f"{OFFLINE_REMEMBER} the launch is on Friday"
    remember = await model.complete(ModelRequest([{"role": "user", "content": said}], tools))
    assert [(c.name, c.arguments) for c in remember.tool_calls] == [
        (
            "memory_write",
            '{"key": "the-launch-is", "content": "the launch is on Friday", '
            '"description": "the launch is on Friday"}',
        )
    ]
    recall = await model.complete(
        ModelRequest([{"role": "user", "content": OFFLINE_RECALL}], tools)
    )
    assert [(c.name, c.arguments) for c in recall.tool_calls] == [("memory_list", "{}")]
