"""Progress a person can read: a line for each test file when its last test is done (what
passed, failed and was skipped, and the seconds its tests took), and a line for each failure
as it happens, instead of a dot per test. With parallel workers (pytest-xdist) the files
finish in any order, each line when its file is whole. `-v` keeps pytest's own lines."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable

import pytest


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


class FileProgress:
    def __init__(self, reporter: pytest.TerminalReporter) -> None:
        self.reporter = reporter
        self.tests: Counter[str] = Counter()  # file -> its tests to run
        self.done: Counter[str] = Counter()
        self.outcomes: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.seconds: Counter[str] = Counter()
        self.finished = 0
        self.failed: set[str] = set()
        self.skipped: set[str] = set()

    def _count(self, nodeids: Iterable[str]) -> None:
        if self.tests:  # every worker collects the same tests: the first one counts
            return
        self.tests.update(_file_of(nodeid) for nodeid in nodeids)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._count(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        self._count(ids)

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report: pytest.TestReport) -> tuple[str, str, str] | None:
        """No dot or letter for a test that passed, was skipped or failed: its file's line
        (and a failure's own line) tell it. Expected failures keep pytest's letters."""
        if hasattr(report, "wasxfail"):
            return None
        if report.failed:
            phase = "failed" if report.when == "call" else "error"
            return phase, "", ""
        if report.skipped:
            return "skipped", "", ""
        if report.passed and report.when == "call":
            return "passed", "", ""
        return None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        file = _file_of(report.nodeid)
        self.seconds[file] += report.duration
        if report.failed and report.nodeid not in self.failed:
            self.failed.add(report.nodeid)
            where = "" if report.when == "call" else f" (in its {report.when})"
            self.reporter.write_line(f"FAILED {report.nodeid}{where}", red=True)
        elif report.skipped:
            self.skipped.add(report.nodeid)
        if report.when != "teardown":
            return
        outcome = (
            "failed"
            if report.nodeid in self.failed
            else "skipped"
            if report.nodeid in self.skipped
            else "passed"
        )
        self.failed.discard(report.nodeid)
        self.skipped.discard(report.nodeid)
        self.outcomes[file][outcome] += 1
        self.done[file] += 1
        self.finished += 1
        if self.done[file] == self.tests[file]:
            self._file_done(file)

    def _file_done(self, file: str) -> None:
        counts = ", ".join(
            f"{self.outcomes[file][outcome]} {outcome}"
            for outcome in ("passed", "failed", "skipped")
            if self.outcomes[file][outcome]
        )
        total = sum(self.tests.values())
        share = 100 * self.finished // total if total else 100
        self.reporter.write_line(
            f"[{share:3d}%] {file}: {counts} ({self.seconds[file]:.1f} s)",
            red=bool(self.outcomes[file]["failed"]),
        )


@pytest.hookimpl(trylast=True)  # after pytest's own, which makes its terminal reporter
def pytest_configure(config: pytest.Config) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    worker = hasattr(config, "workerinput")
    if reporter is None or worker or config.get_verbosity() > 0:
        return
    reporter.showfspath = False  # pytest's "file ...." lines: ours say it once the file is done
    config.pluginmanager.register(FileProgress(reporter), "webagents-file-progress")
