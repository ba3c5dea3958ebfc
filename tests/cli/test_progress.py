"""app.cli.progress: Keras's bar on a terminal, plain lines in a log."""

import io

from app.cli.progress import LineProgress, TerminalProgress, make_progress

VALUES = [("loss", 4.12345), ("lr", 0.00031), ("tok/s", 9876.4)]


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_line_every_few_steps_and_at_the_end_with_an_eta_from_the_pace_so_far():
    lines, clock = [], FakeClock()
    progress = LineProgress(target=10, every=4, write=lines.append, clock=clock)
    for step in range(1, 11):
        progress.update(step, VALUES)
        clock.now += 2.0  # two seconds a step
    assert lines == [
        # Steps 1-4 took 6 s by the update at 4: 2 s a step, 6 steps to go.
        "step 4/10 - loss: 4.1235 - lr: 3.1000e-04 - tok/s: 9876 - eta: 0:12",
        "step 8/10 - loss: 4.1235 - lr: 3.1000e-04 - tok/s: 9876 - eta: 0:04",
        "step 10/10 - loss: 4.1235 - lr: 3.1000e-04 - tok/s: 9876",
    ]


def test_a_moved_target_is_shown_and_ends_the_lines_there():
    lines, clock = [], FakeClock()
    progress = LineProgress(target=100, every=50, write=lines.append, clock=clock)
    progress.update(51, VALUES)  # a resumed run: its pace counts from here
    clock.now += 3600 * 49
    progress.update(100, VALUES)
    progress.target = 160  # a time budget found room for more
    clock.now += 3600 * 50
    progress.update(150, VALUES)
    progress.target = 153
    progress.update(153, VALUES)
    assert [line.split(" - ")[0] for line in lines] == ["step 100/100", "step 150/160", "step 153/153"]
    assert lines[1].endswith("eta: 10:00:00")


def test_a_terminal_gets_keras_s_bar_and_anything_else_lines():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    bar = make_progress(10, 5, stream=Terminal())
    assert isinstance(bar, TerminalProgress) and bar.rewrites_line and bar.target == 10
    lines = make_progress(10, 5, stream=io.StringIO())
    assert isinstance(lines, LineProgress) and not lines.rewrites_line and lines.every == 5
