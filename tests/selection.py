"""Which tests are end-to-end (the `e2e` marker), so that `make check` can leave them out:
those that start processes (`webagents ...`, a PostgreSQL cluster's own, a worker script),
drive a terminal or a browser. A test is marked by what it uses, not by a list to keep up:
the browser and served-portal fixtures, or a module that imports `subprocess`, `pexpect`,
`multiprocessing` or the helpers that start `webagents` (tests/e2e/conftest.py,
tests/e2e/serving.py, tests/portal/processes.py). A test may also say `@pytest.mark.e2e`."""

from __future__ import annotations

import types

import pytest

PROCESS_MODULES = frozenset({"subprocess", "pexpect", "multiprocessing"})
PROCESS_HELPERS = frozenset({"tests.e2e.conftest", "tests.e2e.serving", "tests.portal.processes"})
E2E_FIXTURES = frozenset({"chromium", "page", "served"})


def _starts_processes(module: types.ModuleType) -> bool:
    for value in vars(module).values():
        if isinstance(value, types.ModuleType):
            if value.__name__ in PROCESS_MODULES or value.__name__ in PROCESS_HELPERS:
                return True
        elif getattr(value, "__module__", None) in PROCESS_HELPERS:
            return True
    return False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    seen: dict[str, bool] = {}
    for item in items:
        module = getattr(item, "module", None)
        if module is None:
            continue
        if module.__name__ not in seen:
            seen[module.__name__] = _starts_processes(module)
        fixtures = set(getattr(item, "fixturenames", ()))
        if seen[module.__name__] or fixtures & E2E_FIXTURES:
            item.add_marker(pytest.mark.e2e)
