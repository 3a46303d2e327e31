"""Progress on stderr: on a terminal, one tqdm bar per system and round, filled as
the run reports progress (the row count as it grows, or a scenario's own steps),
closed with the headline figure or the error; into a file or a pipe (a log, CI),
no bars and no carriage returns: one plain line per run when it ends."""

from __future__ import annotations

import sys
from typing import Any, Optional

from .harness import Bar
from .report import Field
from .systems.common import Figures


class ProgressUI:
    """The harness's UI (``harness.UI``): a bar per system and round, or a line
    per run where stderr is not a terminal (``live`` says which; None: ask
    stderr)."""

    def __init__(self, width: int, headline: Field, live: Optional[bool] = None) -> None:
        self.width = width
        self.headline = headline  # the scenario's first field
        self.live = sys.stderr.isatty() if live is None else live

    def start(self, system: str, round_: int, repeat: int, total: int) -> Bar:
        desc = f"{system:<{self.width}} round {round_}/{repeat}"
        if not self.live:
            return RunLine(desc, self.headline)
        from tqdm import tqdm
        bar = tqdm(total=total, desc=desc, leave=True, file=sys.stderr, dynamic_ncols=True)
        return RunBar(bar, total, self.headline)


def outcome(ok: bool, figures: Figures, error: str, headline: Field) -> str:
    """A run's result in a few words: its headline figure and peak RSS, or its error."""
    if not ok:
        return f"FAILED: {error[:60]}"
    key, label, fmt = headline
    rss = figures.get("peak_rss_mb")
    return f"{fmt.format(figures[key])} {label}" + (f", {rss:.0f} MB" if rss is not None else "")


class RunBar:
    """One run's bar: moved by ``update_to``, closed by ``finish``."""

    def __init__(self, bar: Any, total: int, headline: Field) -> None:
        self.bar, self.total, self.headline = bar, total, headline  # bar: tqdm's, untyped

    def update_to(self, n: int) -> None:
        self.bar.update(max(0, min(n, self.total) - self.bar.n))

    def finish(self, ok: bool, figures: Figures, error: str) -> None:
        if ok:
            self.bar.update(self.total - self.bar.n)
        self.bar.set_postfix_str(outcome(ok, figures, error, self.headline))
        self.bar.close()


class RunLine:
    """One run in a log: nothing while it runs, one line when it ends."""

    def __init__(self, desc: str, headline: Field) -> None:
        self.desc, self.headline = desc, headline

    def update_to(self, n: int) -> None:
        pass

    def finish(self, ok: bool, figures: Figures, error: str) -> None:
        print(f"{self.desc}: {outcome(ok, figures, error, self.headline)}", file=sys.stderr,
              flush=True)
