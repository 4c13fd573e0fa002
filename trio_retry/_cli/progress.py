"""A one-line transfer progress bar for the command line, drawn on a terminal's stderr.

``render`` is pure (bytes so far, elapsed seconds, width -> text); :class:`ProgressBar` owns
the throttling and the writes. Redraws happen at most every ``interval`` seconds (10 per second
by default) whatever the chunk rate, so drawing costs a few writes per second however fast the
transfer runs. The clock is passed in by the caller.

A known total (Content-Length, a file's size) gives a percentage, a bar and an ETA; an unknown
one a spinner. Written by us rather than taken from a library: the whole job is the format
below, and the CLI adds no runtime dependency.
"""

from __future__ import annotations

from typing import TextIO

__all__ = ["ProgressBar", "human_bytes", "render"]

SPINNER = "|/-\\"
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_bytes(count: float) -> str:
    """``1536`` -> ``1.5 KiB``: binary units, one decimal from KiB up."""
    value = float(count)
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def _clock(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def render(
    label: str, done: int, total: int | None, elapsed: float, width: int, tick: int = 0
) -> str:
    """One line, at most ``width`` characters: ``label  42% [####----]  21.0 MiB / 50.0 MiB
    12.3 MiB/s  ETA 0:02`` when ``total`` is known, ``label  |  21.0 MiB  12.3 MiB/s``
    (``tick`` turns the spinner) when it is not."""
    rate = done / elapsed if elapsed > 0 else 0.0
    speed = f"{human_bytes(rate)}/s"
    if total is None:
        line = f"{label}  {SPINNER[tick % len(SPINNER)]}  {human_bytes(done)}  {speed}"
        return line[:width]
    fraction = min(1.0, done / total) if total > 0 else 1.0
    if done >= total:
        eta = f"in {_clock(elapsed)}"
    elif rate > 0:
        eta = f"ETA {_clock((total - done) / rate)}"
    else:
        eta = "ETA --:--"
    head = f"{label} {fraction * 100:3.0f}% "
    tail = f" {human_bytes(done)} / {human_bytes(total)}  {speed}  {eta}"
    room = width - len(head) - len(tail) - 2
    if room < 10:  # a narrow terminal: numbers only
        return (head + tail.lstrip())[:width]
    filled = int(room * fraction)
    return f"{head}[{'#' * filled}{'-' * (room - filled)}]{tail}"


class ProgressBar:
    """Draws :func:`render` on ``stream`` (a terminal), in place, throttled.

    ``update`` costs a comparison unless ``interval`` has passed since the last draw;
    ``finish`` draws the final state and ends the line. Nothing is written before the first
    ``update`` or ``finish``.
    """

    def __init__(
        self,
        stream: TextIO,
        label: str,
        total: int | None,
        started: float,
        *,
        width: int = 80,
        interval: float = 0.1,
    ) -> None:
        self._stream = stream
        self._label = label
        self._total = total
        self._started = started
        self._width = max(20, width - 1)  # the last column would wrap on some terminals
        self._interval = interval
        self._next_draw = started  # the first update draws
        self._tick = 0
        self.done = 0
        self.draws = 0

    def update(self, done: int, now: float) -> None:
        """Record ``done`` bytes so far; redraw if ``interval`` passed since the last draw."""
        self.done = done
        if now >= self._next_draw:
            self._next_draw = now + self._interval
            self._draw(now)

    def finish(self, now: float) -> None:
        """Draw the final state and end the line."""
        self._draw(now)
        self._stream.write("\n")
        self._stream.flush()

    def _draw(self, now: float) -> None:
        self._tick += 1
        line = render(
            self._label, self.done, self._total, now - self._started, self._width, self._tick
        )
        # \r back to column 0, then the line, then erase whatever a longer earlier line left.
        self._stream.write(f"\r{line}\x1b[K")
        self._stream.flush()
        self.draws += 1
