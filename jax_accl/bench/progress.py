"""Progress of a long benchmark run, on stderr: what runs now, how many pieces of how
many, the time spent and an estimate of the time left.

A run is a list of pieces (one size of one job), each weighted by what it costs: a fixed
part (compiling, warming up, launching) plus its bytes. The time left is the time spent
so far scaled by the weight still to come. Workers of a multi-process job report the
piece they start as a line "PROGRESS <json>" on stdout, which the launcher hands to
`Progress.begin` (see jax_accl/testing/launch.py, `on_progress`)."""

from __future__ import annotations

import json
import sys
import time

FIXED_BYTES = 4 << 20  # what a piece costs besides its bytes, in bytes' worth of time


def weight(size_bytes: int) -> float:
    return float(size_bytes + FIXED_BYTES)


def clock(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def report_piece(**fields) -> None:
    """A worker's report that it starts a piece (printed on stdout for the launcher)."""
    print("PROGRESS " + json.dumps(fields), flush=True)


class Progress:
    def __init__(self, title: str, weights: list[float], stream=None):
        self.title, self.weights = title, list(weights)
        self.stream = stream if stream is not None else sys.stderr
        self.started = time.monotonic()
        self.current = -1  # the piece running now

    def begin(self, now: str) -> None:
        """The next piece starts; `now` says what it is."""
        self.current = min(self.current + 1, len(self.weights) - 1)
        done = sum(self.weights[: self.current])
        elapsed = time.monotonic() - self.started
        left = (
            ""
            if done == 0
            else f", about {clock(elapsed * (sum(self.weights) - done) / done)} left"
        )
        self._say(f"{self.current + 1}/{len(self.weights)} {now} ({clock(elapsed)} so far{left})")

    def finish(self) -> None:
        self._say(f"done: {len(self.weights)} pieces in {clock(time.monotonic() - self.started)}")

    def _say(self, text: str) -> None:
        print(f"[{self.title}] {text}", file=self.stream, flush=True)
