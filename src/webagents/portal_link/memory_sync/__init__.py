"""`memory: {portal: true}` (P7): the notes synced with the portal's memory store. `sync` is
the entry point; `files` what it keeps on this machine; `push` and `pull` its two halves;
`search` the portal's results of `memory_search`. The notes are written through their store,
`webagents.notes`, which sits below both this sync and the memory skill."""
