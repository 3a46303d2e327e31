"""Terminal table, JSON file and chart for one benchmark run."""

import json
import os
import platform
import sys

from .systems import SYSTEMS


def environment(url, kind):
    """Versions of Python, libraries and the server, and the machine."""
    from importlib import metadata
    libs = {}
    for dist in ("adb-async", "psycopg2-binary", "PyMySQL", "tornado", "Twisted", "asyncpg",
                 "aiopg", "psycopg", "psycopg-pool", "aiomysql", "txpostgres", "uvloop",
                 "pymongo", "motor"):
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


def server_version(url, kind):
    import adb.sync
    from . import mongo
    if kind == mongo.SCHEME:
        return mongo.server_version(url)
    try:
        with adb.sync.Database(url, pool_size=1) as db:
            if kind == "sqlite":
                return "SQLite " + db.runQuery("select sqlite_version()")[0][0]
            return db.runQuery("select version()")[0][0]
    except Exception as exc:  # reported, not fatal: the runs will say more
        return f"unknown ({type(exc).__name__})"


def table(summary, unavailable, fields, baselines=("adbapi", "threads"), roster=SYSTEMS):
    """One line per report row (a system, or a system in a variant at a pool size):
    the scenario's ``fields`` (the first as median (min-max), the rest as medians),
    then the headline's ratio to each baseline system in the same variant and pool
    size. ``unavailable`` maps row names to the reason they did not run."""
    (key, label, fmt), rest = fields[0], fields[1:]
    width = max([22, *map(len, summary), *map(len, unavailable)])
    head = f"{'system':<{width}} {label + ' median (min-max)':>32}"
    head += "".join(f" {name:>12}" for _, name, _ in rest)
    head += "".join(f" {'x ' + b:>10}" for b in baselines)
    lines = [head, "-" * len(head)]
    for name, entry in summary.items():
        if key not in entry:
            lines.append(f"{name:<{width}} ERROR: {entry['errors'][0] if entry['errors'] else '?'}")
            continue
        r = entry[key]
        cell = f"{fmt.format(r['median'])} ({fmt.format(r['min'])}-{fmt.format(r['max'])})"
        line = f"{name:<{width}} {cell:>32}"
        for other, _, other_fmt in rest:
            value = entry.get(other, {}).get("median")
            line += f" {other_fmt.format(value) if value is not None else '-':>12}"
        line += "".join(f" {_ratio(r['median'], _baseline(summary, entry, b, key)):>10}"
                        for b in baselines)
        if entry["errors"]:
            line += f"  ({len(entry['errors'])} failed: {entry['errors'][0]})"
        lines.append(line)
    for name, reason in unavailable.items():
        lines.append(f"{name:<{width}} not available: {reason}")
    shown = dict.fromkeys([e.get("system", n) for n, e in summary.items()]
                          + [n for u in unavailable for n in roster
                             if u == n or u.startswith(n + " ")])
    legend = [f"  {name}: {roster[name].label}" + (f" ({roster[name].note})" if roster[name].note else "")
              for name in shown if name in roster]
    return "\n".join(lines + [""] + legend)


def _baseline(summary, entry, system, key):
    """The median of ``key`` for ``system`` in the same variant and pool size as
    ``entry``, or None."""
    for other in summary.values():
        if (other.get("system") == system and other.get("variant") == entry.get("variant")
                and other.get("pool_size") == entry.get("pool_size")):
            return other.get(key, {}).get("median")
    return None


def _ratio(value, base):
    return f"{value / base:.2f}x" if base else "-"


def write_json(path, document):
    with open(path, "w") as f:
        json.dump(document, f, indent=2, default=str)


def plot(path, summary, title, fields):
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
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def html(path, title, text_table, env, summary, fields):
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


def line_chart(path, title, lines, xlabel, ylabel, log_base=10):
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
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
