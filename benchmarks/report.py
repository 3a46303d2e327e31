"""Terminal table, JSON file and chart for one benchmark run."""

from __future__ import annotations

import json
import os
import platform
import sys
import textwrap
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from .systems import SYSTEMS, Entrant

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: ``(key, label, format)`` of a figure the report shows
Field = tuple[str, str, str]
#: ``{row name: {"system", "variant", "pool_size", "runs", "errors", and per figure
#: {"median", "min", "max"}}}``: what ``harness.summary_of`` makes of the runs
Summary = dict[str, dict[str, Any]]
#: the distributions whose versions the report records (when installed): the
#: drivers, the frameworks, web servers and their accelerators, the MongoDB clients
LIBRARIES = ("adb-async", "psycopg2-binary", "PyMySQL", "tornado", "Twisted", "asyncpg", "aiopg",
             "psycopg", "psycopg-pool", "aiomysql", "txpostgres", "starlette", "uvicorn",
             "uvloop", "httptools", "pymongo", "motor", "SQLAlchemy")


def quantile(values: Sequence[float], q: float) -> float:
    """The value at fraction ``q`` (0-1) of ``values`` sorted: the one at index
    ``int(q * n)``, the largest for q near 1 (the web tools' percentiles;
    ``benchmarks.notify.percentile`` ranks to the nearest instead)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def environment(url: str, kind: str) -> dict[str, Any]:
    """Versions of Python, libraries and the server, and the machine."""
    from importlib import metadata
    libs = {}
    for dist in LIBRARIES:
        try:
            libs[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "hostname": platform.node(),
        "libraries": libs,
        "server": server_version(url, kind),
    }


def server_version(url: str, kind: str) -> str:
    """What answers ``url``: 'PostgreSQL 15.20 on ...', 'SQLite 3.40.1', the
    MongoDB server or its stand-in; 'unknown (...)' if it does not answer."""
    import adb.sync

    from . import mongo
    if kind == mongo.SCHEME:
        return mongo.server_version(url)
    try:
        with adb.sync.Database(url, pool_size=1) as db:
            if kind == "sqlite":
                return "SQLite " + str(db.runQuery("select sqlite_version()")[0][0])
            return str(db.runQuery("select version()")[0][0])
    except Exception as exc:  # reported, not fatal: the runs will say more
        return f"unknown ({type(exc).__name__})"


#: what a column of the table means, by its figure's key (the label is the field's)
COLUMNS = {
    "rows_per_s": "rows per second of wall clock, from the first call to the last one "
                  "acknowledged (connections opened before the clock)",
    "seconds": "the run's wall-clock time",
    "peak_rss_mb": "the client process's peak resident memory (ru_maxrss), MB",
    "rss_growth_mb": "how much the client's resident memory grew during the run, MB",
    "cpu_us_per_row": "the client process's CPU time (user + system, every thread, start-up "
                      "included) divided by the rows, in microseconds: what the client costs "
                      "a machine it shares with the server",
    "db_cpu_us_per_row": "the database server's processes on this machine: their CPU time "
                         "during the inserts alone divided by the rows, in microseconds",
    "machine_busy": "how busy all the machine's cores were during the inserts, whoever "
                    "ran on them (/proc/stat): near 100%, client and server together are "
                    "bound by the CPU they spend a row",
    "opening_ratio": "the rate over the run's first 0.5 s divided by its whole rate: below 1 "
                     "the system warms up, 1 it starts at full speed (adb's systems only: "
                     "read from the pool's own counter; - for the others)",
    "insert_us": "microseconds per insert, each awaited before the next",
    "select_us": "microseconds per select by key, each awaited before the next",
}
#: the width the notes under the table are wrapped to
WIDTH = 88
#: what the report says of a reason a system cannot run, where it can say more
WHY_NOT = {"does not talk to sqlite": "need a server: --dburl postgresql://... or mysql://..."}


def table(summary: Summary, unavailable: Mapping[str, str], fields: Sequence[Field],
          baselines: Sequence[str] = ("adbapi", "threads"),
          roster: Mapping[str, Entrant] = SYSTEMS) -> str:
    """One line per report row (a system, or a system in a variant at a pool size):
    the scenario's ``fields`` (the first as median (min-max) over the rounds, or
    the one figure of a single round; the rest as medians), then the headline's
    ratio to each baseline system that ran, in the same variant and pool size. Under it: one
    line per reason some rows did not run (``unavailable`` maps row names to it),
    the systems that ran, and what the columns mean."""
    (key, label, fmt), rest = fields[0], fields[1:]
    ran = dict.fromkeys(e.get("system", n) for n, e in summary.items())
    baselines = [b for b in baselines if b in ran]  # a ratio to a system that ran
    rounds = max((entry["runs"] for entry in summary.values()), default=0)
    width = max([22, *map(len, summary)])
    head = f"{'system':<{width}} " + (f"{label + ' median (min-max)':>32}" if rounds > 1
                                      else f"{label:>14}")
    head += "".join(f" {name:>12}" for _, name, _ in rest)
    head += "".join(f" {'x ' + b:>10}" for b in baselines)
    lines = [head, "-" * len(head)]
    for name, entry in summary.items():
        if key not in entry:
            lines.append(f"{name:<{width}} ERROR: {entry['errors'][0] if entry['errors'] else '?'}")
            continue
        r = entry[key]
        if rounds > 1:
            cell = f"{fmt.format(r['median'])} ({fmt.format(r['min'])}-{fmt.format(r['max'])})"
            line = f"{name:<{width}} {cell:>32}"
        else:
            line = f"{name:<{width}} {fmt.format(r['median']):>14}"
        for other, _, other_fmt in rest:
            value = entry.get(other, {}).get("median")
            line += f" {other_fmt.format(value) if value is not None else '-':>12}"
        line += "".join(f" {_ratio(r['median'], _baseline(summary, entry, b, key)):>10}"
                        for b in baselines)
        if entry["errors"]:
            line += f"  ({len(entry['errors'])} failed: {entry['errors'][0]})"
        lines.append(line)
    lines += not_run(unavailable)
    legend = [f"  {name}: {roster[name].label}" + (f" ({roster[name].note})" if roster[name].note else "")
              for name in ran if name in roster]
    return "\n".join(lines + [""] + legend + [""] + notes(rounds, fields, baselines))


def not_run(unavailable: Mapping[str, str]) -> list[str]:
    """One line per reason: the rows that did not run for it, then why."""
    by_reason: dict[str, list[str]] = {}
    for name, reason in unavailable.items():
        by_reason.setdefault(reason, []).append(name)
    return [f"not run here: {', '.join(names)} ({WHY_NOT.get(reason, reason)})"
            for reason, names in by_reason.items()]


def notes(rounds: int, fields: Sequence[Field], baselines: Sequence[str]) -> list[str]:
    """Under the table: how many rounds its figures are (one round: how to get a
    median), and what each column means."""
    label = fields[0][1]
    if rounds > 1:
        head = (f"{label}: median (min-max) over {rounds} interleaved rounds; the other "
                "columns: medians.")
    else:
        head = ("One round: each figure is a single run, with no median and no spread, so "
                "the machine's noise goes unseen; --repeat N (3 or more) runs N interleaved "
                "rounds and gives median (min-max).")
    columns = [f"{field_label}: {COLUMNS[key]}" for key, field_label, _ in fields
               if key in COLUMNS]
    columns += [f"x {b}: {label} divided by {_possessive(b)} in the same pool size and variant"
                for b in baselines]
    return textwrap.wrap(head, WIDTH) + [
        line for text in columns
        for line in textwrap.wrap(text, WIDTH, initial_indent="  ", subsequent_indent="    ")]


def _possessive(name: str) -> str:
    return name + ("'" if name.endswith("s") else "'s")


def _baseline(summary: Summary, entry: Mapping[str, Any], system: str,
              key: str) -> Optional[float]:
    """The median of ``key`` for ``system`` in the same variant and pool size as
    ``entry``, on the same interpreter, or None."""
    for other in summary.values():
        if (other.get("system") == system and other.get("variant") == entry.get("variant")
                and other.get("pool_size") == entry.get("pool_size")
                and other.get("python", "") == entry.get("python", "")):
            return other.get(key, {}).get("median")
    return None


def _ratio(value: float, base: Optional[float]) -> str:
    return f"{value / base:.2f}x" if base else "-"


def write_json(path: str, document: Mapping[str, Any]) -> None:
    with open(path, "w") as f:
        json.dump(document, f, indent=2, default=str)


def plot(path: str, summary: Summary, title: str, fields: Sequence[Field]) -> None:
    """Bar chart of the headline field (median, min-max whiskers) and peak RSS per system."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    key, label, _ = fields[0]
    names = [n for n, e in summary.items() if key in e]
    if not names:
        return
    rate = [summary[n][key] for n in names]
    rss = [summary[n].get("peak_rss_mb", {}).get("median", 0) for n in names]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 0.45 * len(names) + 1.8))
    y = range(len(names))
    medians = [r["median"] for r in rate]
    errors = [[m - r["min"] for m, r in zip(medians, rate)],
              [r["max"] - m for m, r in zip(medians, rate)]]
    ax1.barh(y, medians, xerr=errors, color="#4878a8", capsize=3)
    ax1.set_yticks(list(y), names)
    ax1.invert_yaxis()
    ax1.set_xlabel(f"{label} (median; whiskers min-max)")
    ax2.barh(y, rss, color="#a86848")
    ax2.set_yticks(list(y), [""] * len(names))
    ax2.invert_yaxis()
    ax2.set_xlabel("peak RSS, MB (median)")
    save(fig, path, title)


def html(path: str, title: str, text_table: str, env: Mapping[str, Any], summary: Summary,
         fields: Sequence[Field]) -> None:
    """A single self-contained page: the table, the chart (inline SVG) and the environment."""
    import html as escape
    import io
    chart = ""
    try:
        buffer = io.StringIO()
        svg_path = path + ".svg"
        plot(svg_path, summary, title, fields)
        with open(svg_path) as f:
            buffer.write(f.read())
        os.remove(svg_path)
        chart = buffer.getvalue()
    except ImportError:
        chart = "<p>(matplotlib is not installed: no chart)</p>"
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{escape.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:72rem;margin:2rem auto}}pre{{background:#f4f4f4;padding:1rem;overflow:auto}}</style>
</head><body>
<h1>{escape.escape(title)}</h1>
<pre>{escape.escape(text_table)}</pre>
{chart}
<h2>Environment</h2>
<pre>{escape.escape(json.dumps(env, indent=2))}</pre>
</body></html>
"""
    with open(path, "w") as f:
        f.write(page)


#: a line of ``line_chart``: (x, {"median", "min", "max"}) points
Points = list[tuple[int, Mapping[str, float]]]


def line_chart(path: str, title: str, lines: Mapping[str, Points], xlabel: str, ylabel: str,
               log_base: int = 10) -> None:
    """One line per label through ``lines[label] = [(x, {"median", "min", "max"})]``,
    min-max bars, a log x axis ticked at the xs: web's requests/s against
    connections, bigdata's records/s against pool size."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for label, points in lines.items():
        points = sorted(points, key=lambda point: point[0])
        xs, figures = [x for x, _ in points], [f for _, f in points]
        medians = [f["median"] for f in figures]
        ax.errorbar(xs, medians, yerr=[[m - f["min"] for m, f in zip(medians, figures)],
                                       [f["max"] - m for m, f in zip(medians, figures)]],
                    marker="o", capsize=3, label=label)
    ticks = sorted({x for points in lines.values() for x, _ in points})
    ax.set_xscale("log", base=log_base)
    ax.set_xticks(ticks, [str(x) for x in ticks])
    ax.minorticks_off()
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    save(fig, path, title)


def save(fig: Figure, path: str, title: str) -> None:
    """Title ``fig`` (``suptitle``), write it to ``path`` (.png or .svg), close it."""
    import matplotlib.pyplot as plt
    suptitle(fig, title)
    fig.savefig(path)
    plt.close(fig)


def suptitle(fig: Figure, title: str, fontsize: float = 10) -> None:
    """Title ``fig`` over its whole width and lay it out. Each line of the title is
    wrapped to the figure's width (a 10-point character is about a twelfth of an
    inch), so that a long one (a run's options, a server's version) is not cut off
    at the edges; the layout then makes room for every line."""
    width = max(20, int(fig.get_figwidth() * 72 / (0.6 * fontsize)))
    lines = [part for line in title.splitlines() for part in textwrap.wrap(line, width) or [""]]
    fig.suptitle("\n".join(lines), fontsize=fontsize)
    fig.tight_layout()
