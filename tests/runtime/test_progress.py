"""app.runtime.progress: Keras's bar on a terminal, plain lines in a log."""

import io

from app.runtime.progress import CountProgress, LineProgress, TerminalProgress, format_seconds, make_progress

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


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_counts_in_a_log_are_a_line_every_interval_and_a_closing_one():
    stream, clock = io.StringIO(), FakeClock()
    progress = CountProgress("decoding", 1014, "sentences", stream=stream, interval=30.0, clock=clock)
    for done in range(64, 1014, 64):  # a batch of 64 every 2 s
        clock.now += 2.0
        progress.update(done)
    clock.now += 1.0
    progress.update(1014)
    progress.close()
    assert stream.getvalue().splitlines() == [
        # The first update 30 s or more after the start, then 30 s or more after that line.
        "decoding: 960/1,014 sentences - 32.0 sentences/s - eta 0:02",
        "decoding: 1,014 sentences in 31.0 s - 32.7 sentences/s",
    ]


def test_counts_on_a_terminal_redraw_one_line_and_end_it():
    stream, clock = Terminal(), FakeClock()
    progress = CountProgress("decoding", 300, "sentences", stream=stream, clock=clock, redraw_seconds=0.5)
    clock.now += 1.0
    progress.update(100)
    clock.now += 0.25  # too soon to redraw
    progress.update(150)
    clock.now += 0.75
    progress.update(200)
    clock.now += 1.0
    progress.update(300)  # the last count is close()'s
    progress.close()
    assert stream.getvalue() == (
        "\rdecoding: 100/300 sentences - 100 sentences/s - eta 0:02\x1b[K"
        "\rdecoding: 200/300 sentences - 100 sentences/s - eta 0:01\x1b[K"
        "\rdecoding: 300 sentences in 3.0 s - 100 sentences/s\x1b[K\n"
    )


def test_nothing_counted_closes_without_a_rate_and_durations_read_as_minutes_past_one():
    stream, clock = io.StringIO(), FakeClock()
    progress = CountProgress("decoding", 0, "sentences", stream=stream, clock=clock)
    progress.close()
    assert stream.getvalue() == "decoding: 0 sentences in 0.0 s\n"
    assert [format_seconds(s) for s in (0.04, 59.9, 59.96, 61, 3725)] == ["0.0 s", "59.9 s", "1:00", "1:01", "1:02:05"]
