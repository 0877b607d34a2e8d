"""The memory store of each agent (SPEC P5, P6): entries, versions, sync by cursor, search."""
