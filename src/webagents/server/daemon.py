"""The daemon's host: every agent folder under a root, reloaded when its files change.

A folder is an agent when it holds an AGENT.md. When an agent's files change it is loaded
again; if the new version does not load, the last good one keeps being served and the error
is logged. An agent folder that disappears stops being served.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import watchfiles

from ..agent_file import AGENT_FILE
from ..chat_completions import NO_ENDPOINT
from ..errors import WebAgentsError
from ..model import Model
from .hosting import AgentHost, ServedAgent

log = logging.getLogger("webagents.daemon")

# Closing a replaced agent waits this long, so that requests it is answering can finish.
RETIRE_AFTER_SECONDS = 60.0


class _AgentFiles(watchfiles.DefaultFilter):
    """Changes that matter: not the state agents write (.webagents/) nor editors' files."""

    def __call__(self, change: watchfiles.Change, path: str) -> bool:
        return super().__call__(change, path) and "/.webagents/" not in path + "/"


class FolderHost(AgentHost):
    def __init__(
        self, root: Path, *, model: Model | None = None, profile: str | None = None
    ) -> None:
        super().__init__()
        self.root = root.resolve()
        self._model = model
        self._profile = profile
        self._by_folder: dict[Path, ServedAgent] = {}
        self._retiring: set[asyncio.Task[None]] = set()
        for folder in self._agent_folders():
            self._load(folder)

    def _agent_folders(self) -> list[Path]:
        return sorted(
            child
            for child in self.root.iterdir()
            if child.is_dir() and not child.name.startswith(".") and (child / AGENT_FILE).is_file()
        )

    def _load(self, folder: Path) -> None:
        """Load `folder`'s agent now: at start, before anything is served."""
        if not self._gone(folder):
            self._install(folder, self._loaded(folder))

    async def _reload(self, folder: Path) -> None:
        """Load `folder`'s agent again while serving. Loading is synchronous and may take
        seconds (an agent's MCP servers start and list their tools), so it runs on a worker
        thread: the event loop goes on answering, the last version serving its callers."""
        if not self._gone(folder):
            self._install(folder, await asyncio.to_thread(self._loaded, folder))

    def _gone(self, folder: Path) -> bool:
        """Whether `folder` holds no agent (any more): then it is no longer served."""
        if (folder / AGENT_FILE).is_file():
            return False
        previous = self._by_folder.get(folder)
        if previous is not None:
            log.info(
                "%s: no AGENT.md any more; agent %r is no longer served", folder, previous.name
            )
            self._remove(folder)
        return True

    def _loaded(self, folder: Path) -> ServedAgent | None:
        """The folder's agent, or None (logged) where it does not load."""
        previous = self._by_folder.get(folder)
        try:
            return ServedAgent.load(folder, model=self._model, profile=self._profile)
        except Exception as exc:  # whatever goes wrong, the daemon goes on watching
            if not isinstance(exc, WebAgentsError):
                log.error("%s: the agent cannot be loaded", folder, exc_info=exc)
            offline = " (or serve the offline model: --offline)" if NO_ENDPOINT in str(exc) else ""
            if previous is not None:
                log.error(
                    "%s%s; still serving the last good version of agent %r",
                    exc,
                    offline,
                    previous.name,
                )
            else:
                log.error("%s%s; the agent is not served until it is fixed", exc, offline)
            return None

    def _install(self, folder: Path, served: ServedAgent | None) -> None:
        if served is None:
            return
        previous = self._by_folder.get(folder)
        clash = next(
            (
                other
                for path, other in self._by_folder.items()
                if path != folder and other.name == served.name
            ),
            None,
        )
        if clash is not None:
            log.error(
                "%s: agent name %r is already served from %s; not serving this one",
                folder,
                served.name,
                clash.agent.directory,
            )
            return
        self._remove(folder)
        self._by_folder[folder] = served
        self._agents[served.name] = served
        log.info(
            "%s agent %r from %s: %s",
            "reloaded" if previous else "serving",
            served.name,
            folder,
            self.describe_access(served),
        )

    def _remove(self, folder: Path) -> None:
        old = self._by_folder.pop(folder, None)
        if old is None:
            return
        self._agents.pop(old.name, None)
        try:
            task = asyncio.get_running_loop().create_task(self._retire(old))
        except RuntimeError:  # not serving yet: nothing can be using it
            return
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _retire(self, served: ServedAgent) -> None:
        await asyncio.sleep(RETIRE_AFTER_SECONDS)
        await served.aclose()

    async def reload(self, changed: set[Path]) -> None:
        """Load again every agent folder that holds one of the changed paths."""
        folders = set()
        for path in changed:
            try:
                relative = path.resolve().relative_to(self.root)
            except ValueError:
                continue
            if relative.parts and not relative.parts[0].startswith("."):
                folders.add(self.root / relative.parts[0])
        for folder in sorted(folders):
            await self._reload(folder)

    async def run(self) -> None:
        async for changes in watchfiles.awatch(
            self.root, watch_filter=_AgentFiles(), debounce=300, step=50
        ):
            try:
                await self.reload({Path(path) for _, path in changes})
            except Exception:  # never stop watching: the next change may fix it
                log.exception("reloading agents under %s failed", self.root)

    async def aclose(self) -> None:
        for task in list(self._retiring):
            task.cancel()
        await super().aclose()
