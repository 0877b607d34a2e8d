"""The `openai` skill: any OpenAI-compatible Chat Completions endpoint as the agent's model.

`OPENAI_API_KEY` and `OPENAI_BASE_URL` are honoured, so OpenAI, vLLM, Ollama, llama.cpp's
server and LiteLLM all work; the skill's settings may name them per agent instead.
"""

from __future__ import annotations

import os
import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..chat_completions import NO_ENDPOINT, OpenAIModel
from ..errors import ConfigError
from ..model import Model
from .base import Skill

__all__ = ["NO_ENDPOINT", "OpenAIModel", "OpenAISettings", "OpenAISkill"]


def _resolve_env(value: str | None, what: str) -> str | None:
    if value is None:
        return None
    name = value.removeprefix("env:")
    resolved = os.environ.get(name)
    if not resolved:
        raise ConfigError(f"{what} names the environment variable {name}, which is not set")
    return resolved


class OpenAISettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(default=None, description="the model's name at the endpoint")
    base_url: str | None = None
    api_key: str | None = Field(default=None, description="env:NAME; defaults to OPENAI_API_KEY")
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, gt=0)

    @field_validator("api_key")
    @classmethod
    def _env_only(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"env:[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError(
                "api_key must be env:NAME (the variable that holds the key); "
                "a key itself does not belong in AGENT.md"
            )
        return value

    @field_validator("model")
    @classmethod
    def _bare_name(cls, value: str | None) -> str | None:
        return value.removeprefix("openai/") if value else value


class OpenAISkill(Skill[OpenAISettings]):
    """Provides the agent's model from an OpenAI-compatible endpoint."""

    name = "openai"
    Settings = OpenAISettings

    def model_for(self, model: str | None) -> Model | None:
        wanted = model.removeprefix("openai/") if model else None
        if model is not None and not model.startswith("openai/"):
            return None
        chosen = self.settings.model
        if wanted and chosen and wanted != chosen:
            raise ConfigError(
                f"the agent's model is openai/{wanted} but the openai skill's model setting is "
                f"{chosen}: keep one of them"
            )
        name = chosen or wanted
        if name is None:
            raise ConfigError(
                "no model is named: add `model: openai/<model>` to AGENT.md, "
                "or the openai skill's model setting"
            )
        return OpenAIModel(
            name,
            api_key=_resolve_env(self.settings.api_key, "the openai skill's api_key"),
            base_url=self.settings.base_url,
            temperature=self.settings.temperature,
            max_tokens=self.settings.max_tokens,
        )
