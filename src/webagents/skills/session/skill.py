"""The `session` skill: conversations kept per caller, and continued where they stopped.

Served (S5, S6), a request's `metadata.session_id` names the conversation within the
verified caller's own folder; what is kept is the conversation the request carried plus the
reply, and the system prompt it started with, so that later turns send the same prompt (R5)
and the memory block stays fixed for the conversation (M6). Anonymous callers' conversations
and conversations with no id are not kept. The terminal chat keeps every conversation (S2)
through this skill too: it adds one to an agent whose file has none. With `backend:
robutler` the terminal chat's conversations are also recorded as the owner's chats on the
portal (`webagents.portal_link.chats`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ...caller import OWNER_NAMESPACE
from ...compaction import Summary
from ...context import AgentInfo, Context
from ...errors import ConfigError
from ...portal_link import chats as portal_chats
from ...rights import rights_of
from ...sessions.session_file import SessionFile, Version, new_session, title_of
from ...sessions.store import LocalSessionStore
from ..base import Restored, Skill
from ..hooks import ConversationView, FinishedTurn


class SessionSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["local", "robutler"] = Field(
        default="local", description="local: this machine; robutler: the portal too"
    )
    caller_sessions: int | None = Field(
        default=1000, ge=1, description="conversations kept for each caller but the owner"
    )
    owner_sessions: int | None = Field(
        default=None, ge=1, description="conversations kept for the owner (none: no limit)"
    )
    caller_session_bytes: int | None = Field(
        default=100_000_000,
        ge=1,
        description="bytes of conversations kept for each caller but the owner",
    )
    owner_session_bytes: int | None = Field(
        default=None, ge=1, description="bytes of conversations kept for the owner (none: no limit)"
    )
    channel_senders: int | None = Field(
        default=10_000, ge=1, description="channel senders whose conversations are kept"
    )
    jwt_callers: int | None = Field(
        default=10_000,
        ge=1,
        description="callers verified by a JWT issuer whose conversations are kept",
    )


@dataclass(slots=True)
class _Kept:
    """What the skill knows about one conversation it keeps (in `ctx.state`)."""

    namespace: str
    id: str
    session: SessionFile | None
    """As last loaded or saved; None until its first turn is kept."""
    version: Version | None


class SessionSkill(Skill[SessionSettings]):
    """Conversations in `~/.webagents/sessions/<folder>/<agent>/` (or the profile's)."""

    name = "session"
    Settings = SessionSettings

    def __init__(
        self,
        settings: SessionSettings | None = None,
        /,
        *,
        agent_dir: str | Path | None = None,
        **values: Any,
    ) -> None:
        super().__init__(settings, **values)
        self._agent_dir = Path(agent_dir) if agent_dir is not None else None
        self._store: LocalSessionStore | None = None
        self._info: AgentInfo | None = None
        self.portal: portal_chats.PortalChats | None = None
        """backend: robutler, once the terminal chat asked for it (`record_owner_chats`)."""

    def bind(self, agent: AgentInfo) -> None:
        directory = self._agent_dir or agent.directory
        if directory is None:
            raise ConfigError(
                "the session skill keeps conversations by agent folder: give it one "
                "(SessionSkill(agent_dir=...), Agent(directory=...), or load the agent "
                "from its folder)"
            )
        self._info = AgentInfo(agent.name, directory, agent.profile)
        self._store = LocalSessionStore(
            directory,
            agent.name,
            profile=agent.profile,
            caller_sessions=self.settings.caller_sessions,
            owner_sessions=self.settings.owner_sessions,
            caller_session_bytes=self.settings.caller_session_bytes,
            owner_session_bytes=self.settings.owner_session_bytes,
            channel_senders=self.settings.channel_senders,
            jwt_callers=self.settings.jwt_callers,
        )

    @property
    def store(self) -> LocalSessionStore:
        if self._store is None:
            raise ConfigError("the session skill is not part of an agent yet")
        return self._store

    def record_owner_chats(self) -> portal_chats.PortalChats | None:
        """The terminal chat's call (P10): with backend: robutler, the owner's conversations
        are recorded as their chats on the portal from now on (served ones never are); None
        with backend: local. It contacts nothing: what is missing is its `notice`."""
        if self.settings.backend != "robutler":
            return None
        if self.portal is None:
            info = self._info
            if info is None or info.directory is None:
                raise ConfigError("the session skill is not part of an agent yet")
            self.portal = portal_chats.PortalChats(info.directory, info.profile)
        return self.portal

    # -- hooks --------------------------------------------------------------------------------

    async def on_conversation_start(self, ctx: Context) -> None:
        namespace = rights_of(ctx.caller).conversations
        if ctx.conversation_id is None or namespace is None:
            return  # S5: nothing is kept for anonymous callers or unnamed conversations
        found = self.store.open(namespace, ctx.conversation_id)  # SessionError if damaged
        if found is None:
            self.store.admit(namespace)  # refused before the model is asked, not after
        session, version = found if found else (None, None)
        ctx.state[self.name] = _Kept(namespace, ctx.conversation_id, session, version)
        ctx.kept = True

    async def restore(self, ctx: Context) -> Restored | None:
        kept = _kept(ctx)
        if kept is None or kept.session is None:
            return None
        return Restored(
            kept.session.get("system_prompt"),
            Summary.from_dict(kept.session.get("compaction")),
            kept.session["messages"],
        )

    async def before_turn(self, conversation: ConversationView) -> None:
        """A turn this conversation could not keep (another writer kept turns it lacks) is
        a SessionConflict now, before the model computes a reply that would be thrown away.
        Cheap: the files' sizes and times, read again only when they changed. The race
        stays possible (a writer between now and the keep): `keep` checks again, under the
        lock."""
        kept = _kept(conversation.ctx)
        if kept is None or conversation.replaces_kept:
            return  # not kept, or given whole (S6): its keep replaces what is kept
        await asyncio.to_thread(
            self.store.check_extends, kept.namespace, kept.id, conversation.messages, kept.version
        )

    async def keep(self, conversation: ConversationView, turn: FinishedTurn | None) -> None:
        kept = _kept(conversation.ctx)
        if kept is None:
            return
        if kept.session is None:
            session = new_session(
                kept.id,
                conversation.ctx.agent.name,
                [],
                system_prompt=conversation.system_prompt,
            )
        else:
            # A copy: a save the store refuses leaves what was kept as it was read.
            session = kept.session.copy()
            session["usage"] = dict(session["usage"])
        # The conversation as it is now is kept in place of what was: it extends it, or the
        # caller gave it whole (S6); the store refuses to drop kept turns otherwise.
        session["messages"] = list(conversation.messages)
        session["title"] = title_of(session["messages"])
        session.setdefault("system_prompt", conversation.system_prompt)
        if conversation.summary is not None:
            session["compaction"] = conversation.summary.as_dict()  # later turns reuse it
        else:
            session.pop("compaction", None)
        if turn is not None:
            usage = session["usage"]
            usage["prompt_tokens"] = usage.get("prompt_tokens", 0) + turn.usage.prompt_tokens
            usage["completion_tokens"] = (
                usage.get("completion_tokens", 0) + turn.usage.completion_tokens
            )
        kept.version = self.store.save(
            kept.namespace, session, since=kept.version, replace=conversation.replaces_kept
        )
        kept.session = session
        if self.portal is not None and kept.namespace == OWNER_NAMESPACE:
            # Kept here first; then recorded (or queued for later) as the owner's chat.
            await asyncio.to_thread(self.portal.record, kept.id, list(session["messages"]))


def _kept(ctx: Context) -> _Kept | None:
    kept = ctx.state.get(SessionSkill.name)
    return kept if isinstance(kept, _Kept) else None
