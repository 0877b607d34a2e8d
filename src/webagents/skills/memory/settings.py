"""The memory skill's settings (`memory:` under `skills:` in the agent file) and their checks.

The limits are per namespace: `caller_notes` and `caller_note_bytes` for each caller's own,
`owner_notes` and `owner_note_bytes` for `owner` and for `shared` each; `channel_senders` and
`jwt_callers` cap how many callers of those kinds keep notes at all (`skills/newcomers.py`).
The legacy `compaction` setting takes a number or the compaction: block's keys, with one
message for a bad value of either form. `portal: true` syncs the notes with the portal's
memory store (`sync`); `local: false` with it keeps them in the portal alone.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ...agent_spec import CompactionSpec
from ...errors import validation_problems


class MemorySettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    local: bool = Field(default=True, description="keep notes in the agent's folder")
    portal: bool = Field(default=False, description="keep notes on the portal as well")
    notes_budget: int = Field(default=4000, ge=0, description="characters of index in the prompt")
    compaction: int | CompactionSpec | None = Field(
        default=None,
        description="legacy: prompt tokens that trigger a summary, or {threshold, keep} as in "
        "the agent file's compaction: block",
    )
    caller_notes: int | None = Field(
        default=1000, ge=1, description="notes (summaries included) one caller may keep"
    )
    caller_note_bytes: int | None = Field(
        default=10_000_000, ge=1, description="bytes of notes one caller may keep"
    )
    owner_notes: int | None = Field(
        default=None, ge=1, description="notes in owner and in shared, each (none: no limit)"
    )
    owner_note_bytes: int | None = Field(
        default=None, ge=1, description="bytes of notes in owner and in shared, each"
    )
    channel_senders: int | None = Field(
        default=10_000, ge=1, description="channel senders that may keep notes"
    )
    jwt_callers: int | None = Field(
        default=10_000, ge=1, description="callers verified by a JWT issuer that may keep notes"
    )
    sync_seconds: float = Field(
        default=30.0, gt=0, description="with portal: true, seconds between pulls from the portal"
    )

    @field_validator("compaction", mode="before")
    @classmethod
    def _legacy_compaction(cls, value: Any) -> Any:
        # One message for whichever form was meant, not pydantic's one per form of the union.
        if value is None or isinstance(value, CompactionSpec):
            return value
        if isinstance(value, dict):
            try:
                return CompactionSpec.model_validate(value)
            except ValidationError as exc:
                raise ValueError(
                    validation_problems(
                        exc,
                        unknown=lambda where: (
                            f"unknown key {where!r} (it takes: "
                            + ", ".join(CompactionSpec.model_fields)
                            + ")"
                        ),
                        wrong=lambda where, message: f"{where}: {message}",
                    )
                ) from None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        raise ValueError(
            "give a number of prompt tokens (more than 0), or {threshold, keep} as in the "
            "compaction: block"
        )

    @model_validator(mode="after")
    def _a_tier(self) -> MemorySettings:
        if not self.local and not self.portal:
            raise ValueError("at least one of local and portal must be true")
        return self
