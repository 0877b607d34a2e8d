"""`memory: {portal: true}` (P7): the notes synced with the portal's memory store. `sync` is
the entry point; `files` what it keeps on this machine; `push` and `pull` its two halves;
`search` the portal's results of `memory_search`."""

# The sync writes through the memory skill's store (skills/memory/: notes, index, rights), and
# that package's __init__ loads the skill, which runs this sync: the skill's package is loaded
# first, whichever module of either is imported first, so that no module here is seen half
# made (a test or a tool importing `memory_sync.sync` alone would fail otherwise).
import webagents.skills.memory  # noqa: F401
