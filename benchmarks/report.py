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
                 "aiopg", "psycopg", "psycopg-pool", "aiomysql", "txpostgres", "uvloop"):
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
    try:
        with adb.sync.Database(url, pool_size=1) as db:
            if kind == "sqlite":
                return "SQLite " + db.runQuery("select sqlite_version()")[0][0]
            return db.runQuery("select version()")[0][0]
    except Exception as exc:  # reported, not fatal: the runs will say more
        return f"unknown ({type(exc).__name__})"


def table(summary, unavailable, baseline="adbapi"):
    """Rows/s median (min-max), seconds, peak RSS and ratios, one line per system."""
    lines = []
    head = (f"{'system':<22} {'rows/s median (min-max)':>28} {'seconds':>8} {'peak RSS':>9}"
            f" {'CPU us/row':>10}")
    base = summary.get(baseline, {}).get("rows_per_s", {}).get("median")
    threads = summary.get("threads", {}).get("rows_per_s", {}).get("median")
    head += f" {'x ' + baseline:>9} {'x threads':>9}"
    lines += [head, "-" * len(head)]
    for name, entry in summary.items():
        if "rows_per_s" not in entry:
            lines.append(f"{name:<22} ERROR: {entry['errors'][0] if entry['errors'] else '?'}")
            continue
        r, s, m = entry["rows_per_s"], entry["seconds"], entry.get("peak_rss_mb", {})
        cell = f"{r['median']:,.0f} ({r['min']:,.0f}-{r['max']:,.0f})"
        cpu = entry.get("cpu_us_per_row", {}).get("median", 0)
        line = f"{name:<22} {cell:>28} {s['median']:>8.2f} {m.get('median', 0):>7.0f}MB {cpu:>10.0f}"
        line += f" {_ratio(r['median'], base):>9} {_ratio(r['median'], threads):>9}"
        if "insert_us" in entry:
            line += (f"  insert {entry['insert_us']['median']:.0f} us,"
                     f" select {entry['select_us']['median']:.0f} us per call")
        if entry["errors"]:
            line += f"  ({len(entry['errors'])} failed: {entry['errors'][0]})"
        lines.append(line)
    for name, reason in unavailable.items():
        lines.append(f"{name:<22} not available: {reason}")
    legend = [f"  {name}: {SYSTEMS[name].label}" + (f" ({SYSTEMS[name].note})" if SYSTEMS[name].note else "")
              for name in list(summary) + list(unavailable) if name in SYSTEMS]
    return "\n".join(lines + [""] + legend)


def _ratio(value, base):
    return f"{value / base:.2f}x" if base else "-"


def write_json(path, document):
    with open(path, "w") as f:
        json.dump(document, f, indent=2, default=str)


def plot(path, summary, title):
    """Bar chart of rows/s (median, min-max whiskers) and peak RSS per system."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [n for n, e in summary.items() if "rows_per_s" in e]
    if not names:
        return
    rate = [summary[n]["rows_per_s"] for n in names]
    rss = [summary[n].get("peak_rss_mb", {}).get("median", 0) for n in names]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 0.45 * len(names) + 1.8))
    y = range(len(names))
    medians = [r["median"] for r in rate]
    errors = [[m - r["min"] for m, r in zip(medians, rate)],
              [r["max"] - m for m, r in zip(medians, rate)]]
    ax1.barh(y, medians, xerr=errors, color="#4878a8", capsize=3)
    ax1.set_yticks(list(y), names)
    ax1.invert_yaxis()
    ax1.set_xlabel("rows/s (median; whiskers min-max)")
    ax2.barh(y, rss, color="#a86848")
    ax2.set_yticks(list(y), [""] * len(names))
    ax2.invert_yaxis()
    ax2.set_xlabel("peak RSS, MB (median)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def html(path, title, text_table, env, summary):
    """A single self-contained page: the table, the chart (inline SVG) and the environment."""
    import html as escape
    import io
    chart = ""
    try:
        buffer = io.StringIO()
        svg_path = path + ".svg"
        plot(svg_path, summary, title)
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
