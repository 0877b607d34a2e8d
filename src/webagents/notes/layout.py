"""Where notes live on disk, and the rule for keys.

`<agent folder>/.webagents/memory/` holds `owner/`, `shared/` and one folder per caller under
`callers/`. A caller's folder name is a readable prefix plus a hash of its exact namespace, so
two identities never share a folder (no case folding, no path tricks), and no folder name can
leave `callers/`.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from ..caller import OWNER_NAMESPACE, SHARED_NAMESPACE
from ..errors import ToolError

KEY_RULE = (
    "a key is 1-64 characters of a-z 0-9 . _ -, starting with a letter or digit "
    "(for example preferences or launch-plan)"
)
_KEY = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
EPISODE_PREFIX = "episode-"
NAMESPACE_FILE = ".namespace"


def is_key(key: str) -> bool:
    return bool(_KEY.fullmatch(key))


def check_key(key: str, *, episode: bool = False) -> str:
    """The key, or a ToolError with the rule (M4)."""
    if not is_key(key):
        raise ToolError(f"{key!r} is not a valid key: {KEY_RULE}")
    if not episode and key.startswith(EPISODE_PREFIX):
        raise ToolError(
            f"keys starting with {EPISODE_PREFIX!r} are kept for summaries of earlier "
            "conversations; choose another key"
        )
    return key


def caller_folder_name(namespace: str) -> str:
    """`callers/<name>`: a readable prefix and 128 bits of the namespace's SHA-256."""
    digest = hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:32]
    readable = re.sub(r"[^a-z0-9]+", "-", namespace.removeprefix("caller:").lower()).strip("-")
    return f"{readable[:40].strip('-') or 'caller'}-{digest}"


def namespace_folder(root: Path, namespace: str) -> Path:
    if namespace in (OWNER_NAMESPACE, SHARED_NAMESPACE):
        return root / namespace
    if not namespace.startswith("caller:"):
        raise ValueError(f"not a namespace: {namespace!r}")
    return root / "callers" / caller_folder_name(namespace)
