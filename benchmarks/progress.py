"""Progress bars on stderr: one tqdm bar per system and round, filled as the run
reports progress (the row count as it grows, or a scenario's own steps), closed
with the headline figure or the error."""

from __future__ import annotations

import sys
from typing import Any

from .harness import Bar
from .report import Field
from .systems.common import Figures


class ProgressUI:
    """The harness's UI (``harness.UI``): a bar per system and round."""

    def __init__(self, width: int, headline: Field) -> None:
        self.width = width
        self.headline = headline  # the scenario's first field

    def start(self, system: str, round_: int, repeat: int, total: int) -> Bar:
        from tqdm import tqdm
        bar = tqdm(total=total, desc=f"{system:<{self.width}} round {round_}/{repeat}",
                   leave=True, file=sys.stderr, dynamic_ncols=True)
        return RunBar(bar, total, self.headline)


class RunBar:
    """One run's bar: moved by ``update_to``, closed by ``finish``."""

    def __init__(self, bar: Any, total: int, headline: Field) -> None:
        self.bar, self.total, self.headline = bar, total, headline  # bar: tqdm's, untyped

    def update_to(self, n: int) -> None:
        self.bar.update(max(0, min(n, self.total) - self.bar.n))

    def finish(self, ok: bool, figures: Figures, error: str) -> None:
        if ok:
            self.bar.update(self.total - self.bar.n)
            key, label, fmt = self.headline
            rss = figures.get("peak_rss_mb")
            self.bar.set_postfix_str(f"{fmt.format(figures[key])} {label}"
                                     + (f", {rss:.0f} MB" if rss is not None else ""))
        else:
            self.bar.set_postfix_str(f"FAILED: {error[:60]}")
        self.bar.close()
