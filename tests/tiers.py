"""The two tiers of the suite, held by measurement (a pytest plugin, loaded by conftest.py).

    python -m pytest                   # the whole suite: CI, and before a change lands
    python -m pytest -m "not slow"     # the fast tier: after every edit

A test that trains, exports, starts a server or a TensorFlow process is marked `slow`.
This plugin keeps the marks honest and the schedule short:

- **The bound.** An unmarked test whose setup, call and teardown take more than
  `fast_test_seconds` (pytest.ini) fails the run, named in the summary with its time:
  mark it slow, or make it smaller. A module fixture's build counts against the test that
  needs it first, as it does against the fast tier's time; the suite's shared builds
  (`SHARED_BUILDS`: one trained run, its export and a server of it, built once and used
  by both tiers, so that the export and the server stay in the edit-run loop) do not.
- **Every file keeps a fast test**, so that the fast tier touches every module; a file
  whose every test is slow says why in a module-level `ALL_SLOW_BECAUSE = "..."`.
- **Heaviest files first.** Workers take whole files (`--dist loadfile`, so that a module
  fixture is built once), in the order of `tests/file_seconds.json`, each file's measured
  seconds, heaviest first, so that no long file starts last. A file the record does not
  know yet goes first: it may be heavy. `--record-file-seconds` writes the record anew
  from the run (every test of a whole run, or the files run, merged into the record).
"""

import json
import math
import re
import time
from pathlib import Path

import pytest

RECORD = Path(__file__).parent / "file_seconds.json"
SLOW = "slow"
# conftest.py's session fixtures built once per run (or per worker) and shared by every
# test that needs them, in both tiers: the first test to ask would otherwise carry them.
SHARED_BUILDS = ("model_dir", "exported", "tiny_server")
SHARED_SECONDS = "shared_build_seconds"


def pytest_addoption(parser):
    parser.addini(
        "fast_test_seconds", "most seconds an unmarked test may take, setup and teardown included", default="10"
    )
    parser.addoption(
        "--record-file-seconds",
        action="store_true",
        help="write each test file's measured seconds into tests/file_seconds.json (the order workers take files)",
    )


def _file_of(nodeid):
    return nodeid.split("::", 1)[0]


def file_weights(path=RECORD):
    """`{test file: seconds}` as recorded; {} where there is no record."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}


def pytest_collection_modifyitems(session, config, items):
    """Orders the files heaviest first (in every xdist worker alike: the controller takes
    the workers' order), the tests of a file as they are written."""
    weights = file_weights()
    order = {}
    for item in items:
        order.setdefault(_file_of(item.nodeid), len(order))
    items.sort(key=lambda item: (-weights.get(_file_of(item.nodeid), math.inf), order[_file_of(item.nodeid)]))


class _SharedBuilds:
    """Times the shared builds in each test process (a plugin of the whole session, not of
    conftest.py: session fixtures are set up through the session's hooks, which a conftest
    below the root does not receive)."""

    def __init__(self):
        self.seconds = 0.0  # spent in SHARED_BUILDS by this process so far

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        # The fixture's own function only: the fixtures it needs are set up before.
        started = time.perf_counter()
        yield
        if fixturedef.argname in SHARED_BUILDS:
            self.seconds += time.perf_counter() - started

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item):
        # Tells the report, and so the controller, how much of this setup was shared builds.
        before = self.seconds
        yield
        item.user_properties.append((SHARED_SECONDS, self.seconds - before))


def says_why_every_test_is_slow(path, root):
    """Whether the test file `path` (relative to `root`) sets `ALL_SLOW_BECAUSE`."""
    return re.search(r"^ALL_SLOW_BECAUSE = ", (root / path).read_text(encoding="utf-8"), re.MULTILINE) is not None


class _Timings:
    """What the controller (or the one process, without xdist) hears of each test."""

    def __init__(self, config):
        self.config = config
        self.bound = float(config.getini("fast_test_seconds"))
        self.seconds = {}  # nodeid -> setup + call + teardown
        self.shared = {}  # nodeid -> of which in SHARED_BUILDS
        self.slow = set()

    def pytest_runtest_logreport(self, report):
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration
        shared = sum(value for key, value in report.user_properties if key == SHARED_SECONDS)
        self.shared[report.nodeid] = self.shared.get(report.nodeid, 0.0) + shared
        if SLOW in report.keywords:
            self.slow.add(report.nodeid)

    def files_without_a_fast_test(self):
        """The files of which every test ran and every one is slow, and that do not say why
        (in the fast tier, where slow tests do not run, there are none to see)."""
        every_test_slow = {}
        for nodeid in self.seconds:
            path = _file_of(nodeid)
            every_test_slow[path] = every_test_slow.get(path, True) and nodeid in self.slow
        root = Path(str(self.config.rootpath))
        return sorted(
            path for path, all_slow in every_test_slow.items()
            if all_slow and not says_why_every_test_is_slow(path, root)
        )

    def unmarked_between(self, low, high):
        """`[(seconds, nodeid)]` of the unmarked tests whose own time (shared builds left
        out) is over `low` and at most `high`, shortest first."""
        return sorted(
            (own, nodeid)
            for nodeid, seconds in self.seconds.items()
            if nodeid not in self.slow and low < (own := seconds - self.shared.get(nodeid, 0.0)) <= high
        )

    def over_the_bound(self):
        return self.unmarked_between(self.bound, math.inf)

    def pytest_sessionfinish(self, session, exitstatus):
        problems = self.over_the_bound() or self.files_without_a_fast_test()
        if problems and exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if self.config.getoption("record_file_seconds"):
            self.record()

    def record(self):
        files = {}
        for nodeid, seconds in self.seconds.items():
            files[_file_of(nodeid)] = files.get(_file_of(nodeid), 0.0) + seconds
        merged = {**file_weights(), **{path: round(seconds, 1) for path, seconds in files.items()}}
        ordered = dict(sorted(merged.items(), key=lambda entry: (-entry[1], entry[0])))
        RECORD.write_text(json.dumps(ordered, indent=0) + "\n", encoding="utf-8")

    def near_the_bound(self):
        """Unmarked tests over half the bound: the next to mark, before a slower machine fails."""
        return self.unmarked_between(self.bound / 2, self.bound)

    def pytest_terminal_summary(self, terminalreporter):
        def section(title, intro, lines):
            if lines:
                terminalreporter.section(title)
                for line in [intro, *lines]:
                    terminalreporter.line(line)

        def timed(tests):
            return [f"{seconds:8.1f} s  {nodeid}" for seconds, nodeid in reversed(tests)]

        near, over = self.near_the_bound(), self.over_the_bound()
        section(
            "tests near the fast tier's bound",
            f"not marked slow, over half of fast_test_seconds = {self.bound:g} s:",
            timed(near),
        )
        section(
            "tests over the fast tier's bound",
            f"{len(over)} test(s) not marked slow took more than fast_test_seconds = {self.bound:g} s "
            "(pytest.ini), shared builds left out: mark each @pytest.mark.slow, or make it smaller",
            timed(over),
        )
        section(
            "test files without a fast test",
            "every test of these files is slow, so the fast tier never imports them: keep one fast test, "
            'or say why not in ALL_SLOW_BECAUSE = "..." at the top of the file',
            [f"  {path}" for path in self.files_without_a_fast_test()],
        )


def pytest_configure(config):
    config.pluginmanager.register(_SharedBuilds(), "tiers-shared-builds")
    if not hasattr(config, "workerinput"):  # an xdist worker reports to the controller instead
        config.pluginmanager.register(_Timings(config), "tiers-timings")
