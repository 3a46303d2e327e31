"""``python -m benchmarks``: options, system selection, the run, the report.

With no options: the parallel-insert scenario on the embedded default (SQLite in
a temporary file), every system that can run on it, once. The seed's options
(``--db --dbhost --dbpasswd --dbuser --pool_size --use_adb --use_adbapi
--use_tornado --use_txmysql``) still work beside ``--dburl`` and friends.
"""

import argparse
import sys
import tempfile
import time
from urllib.parse import quote

from adb import drivers
from adb.url import parse_url

from . import harness, mongo, report
from .scenarios import SCENARIOS, roster_of, scenario_for
from .systems import SYSTEMS
from .systems.common import kind_of


def parser():
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="adb against its peers on published experiments (see docs/benchmarks.md).")
    p.add_argument("--scenario", default="parallel-insert", choices=sorted(SCENARIOS))
    p.add_argument("--dburl", help="database URL (postgresql://, mysql://, sqlite:///; "
                   "mongodb:// for sequential and mongo-tasks); default: SQLite in a temporary file")
    p.add_argument("--systems", help="comma-separated systems (default: all available); see --list")
    p.add_argument("--rows", type=int, default=None,
                   help="rows to insert (100000 on a server; 20000 on the embedded default, "
                        "so a first run takes about a minute)")
    p.add_argument("--repeat", type=int, default=1, help="interleaved rounds (1)")
    p.add_argument("--pool_size", "--pool-size", type=pool_sizes, default=None,
                   help="connections per system (10, or the scenario's own default); "
                        "a list (15,120,350) runs every system at each size")
    p.add_argument("--json", metavar="FILE", help="write every raw figure and the environment")
    p.add_argument("--plot", metavar="FILE", help="write a chart (.png or .svg)")
    p.add_argument("--html", metavar="FILE", help="write an HTML report (table, chart, environment)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per run before it fails")
    p.add_argument("--list", action="store_true", help="list systems and scenarios, then exit")
    for name, scenario in sorted(SCENARIOS.items()):
        if hasattr(scenario, "add_arguments"):
            scenario.add_arguments(p.add_argument_group(f"the {name} scenario's options"))
    seed = p.add_argument_group("the 2011 benchmark's options")
    seed.add_argument("--db", help="server: postgresql or mysql (with --dbhost etc.)")
    seed.add_argument("--dbname", default="test", help="database name for --db (test)")
    seed.add_argument("--dbhost", default="127.0.0.1")
    seed.add_argument("--dbuser", default=None)
    seed.add_argument("--dbpasswd", default=None)
    seed.add_argument("--use_adb", action="store_true", help="adb (on Tornado, as in 2011)")
    seed.add_argument("--use_adbapi", action="store_true", help="Twisted's adbapi")
    seed.add_argument("--use_tornado", action="store_true",
                      help="run Twisted systems on the asyncio reactor Tornado runs on")
    seed.add_argument("--use_txmysql", action="store_true",
                      help="the txMySQL role (a pure-Python async client on Twisted)")
    return p


def parse(argv):
    p = parser()
    args = p.parse_args(argv)
    if args.db and args.dburl:
        p.error("give --dburl or --db, not both")
    if args.db:
        kind = drivers.family(args.db.lower()).scheme
        if kind not in ("postgresql", "mysql"):
            p.error(f"--db must be postgresql or mysql, not {args.db!r}")
        user = args.dbuser or "root"
        auth = quote(user, safe="") + (":" + quote(args.dbpasswd, safe="") if args.dbpasswd else "")
        args.dburl = f"{kind}://{auth}@{args.dbhost}/{args.dbname}"
    try:
        args.kind = kind_of(args.dburl) if args.dburl else "sqlite"
        scenario = args.scenario_module = scenario_for(args.scenario, args.kind)
    except ValueError as exc:
        p.error(str(exc))
    if args.rows is None:
        args.rows = getattr(scenario, "DEFAULT_ROWS", None) or (
            100_000 if args.dburl else 20_000)
    if args.pool_size is None:
        default = getattr(scenario, "DEFAULT_POOL_SIZE", 10)
        args.pool_size = list(default) if isinstance(default, tuple) else [default]
    if args.rows < 1 or args.repeat < 1:
        p.error("--rows and --repeat must be positive")
    args.options = {a.dest: getattr(args, a.dest) for a in _scenario_arguments(p, scenario)}
    try:
        args.fields = fields_of(scenario, args.options)
        args.variants = variants_of(scenario, args.options)
    except ValueError as exc:
        p.error(str(exc))
    args.system_names = selected_systems(p, args, roster_of(scenario))
    return args


def _scenario_arguments(p, scenario):
    for group in p._action_groups:
        if group.title == f"the {scenario.NAME} scenario's options":
            return group._group_actions
    return []


def pool_sizes(text):
    """``--pool_size``: one size or a comma-separated list of them, each positive."""
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number or numbers, not {text!r}")
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"must be positive, not {text!r}")
    return sizes


def variants_of(scenario, options):
    """The scenario's variants as (name, options) pairs; one unnamed one if it has none."""
    return scenario.variants(options) if hasattr(scenario, "variants") else [("", {})]


def fields_of(scenario, options):
    """The scenario's report fields (a tuple, or a function of its options)."""
    return scenario.fields(options) if hasattr(scenario, "fields") else scenario.FIELDS


def selected_systems(p, args, roster):
    names = []
    if args.use_adb:
        names.append("adb-tornado")
    if args.use_adbapi:
        names.append("adbapi-asyncio" if args.use_tornado else "adbapi")
    if args.use_txmysql:
        names.append("txmysql-role")
    if args.systems:
        names += [n.strip() for n in args.systems.split(",") if n.strip()]
    unknown = [n for n in names if n not in roster]
    if unknown:
        p.error(f"unknown system(s) {', '.join(unknown)} for --scenario {args.scenario}; "
                "--list shows them")
    defaults = getattr(args.scenario_module, "DEFAULT_SYSTEMS", roster)
    return list(dict.fromkeys(names)) or list(defaults)


class ProgressUI:
    """A tqdm bar per system and round, filled as the run reports progress (the row
    count as it grows, or a scenario's own steps)."""

    def __init__(self, width, headline):
        self.width = width
        self.headline = headline  # the scenario's first field

    def start(self, system, round_, repeat, total):
        from tqdm import tqdm
        bar = tqdm(total=total, desc=f"{system:<{self.width}} round {round_}/{repeat}",
                   leave=True, file=sys.stderr, dynamic_ncols=True)
        headline = self.headline

        class Bar:
            def update_to(self, n):
                bar.update(max(0, min(n, total) - bar.n))

            def finish(self, ok, figures, error):
                if ok:
                    bar.update(total - bar.n)
                    key, label, fmt = headline
                    rss = figures.get("peak_rss_mb")
                    bar.set_postfix_str(f"{fmt.format(figures[key])} {label}"
                                        + (f", {rss:.0f} MB" if rss is not None else ""))
                else:
                    bar.set_postfix_str(f"FAILED: {error[:60]}")
                bar.close()
        return Bar()


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.list:
        for name, scenario in SCENARIOS.items():
            print(f"scenario {name}: {scenario.DESCRIPTION}"
                  + (" (and on MongoDB: the MongoDB clients of mongo-tasks)"
                     if name == "sequential" else ""))
            for system_name, system in roster_of(scenario).items():
                if roster_of(scenario) is not SYSTEMS or name == "parallel-insert":
                    print(f"  {system_name:<22} {system.label}; databases: "
                          f"{', '.join(system.kinds)}" + (f"; {system.note}" if system.note else ""))
        return 0
    scenario = args.scenario_module
    roster = roster_of(scenario)
    tmpdir = None
    url = args.dburl
    if url is None:
        tmpdir = tempfile.TemporaryDirectory(prefix="adb-bench-")
        url = f"sqlite:///{tmpdir.name}/bench.db"
    kind = kind_of(url)
    matrix, unavailable = plan(scenario, roster, kind, args)
    started = time.time()
    setting = _setting(scenario, args)
    print(f"{scenario.NAME} (seed {scenario.SEED}): {setting} on {_describe(url)}", file=sys.stderr)
    runs = harness.run_matrix(matrix, scenario, url, args.rows, args.repeat, args.timeout,
                              ProgressUI(max((len(e.name) for e in matrix), default=10),
                                         args.fields[0]), args.options)
    summary = harness.summarise(runs)
    env = report.environment(url, kind)
    if not getattr(scenario, "USES_DATABASE", True):
        env["server"] = "no database"
    if hasattr(scenario, "tools"):
        env["tools"] = scenario.tools()
    baselines = getattr(scenario, "BASELINES", ("adbapi", "threads"))
    text = report.table(summary, unavailable, args.fields, baselines, roster)
    print()
    print(f"{scenario.NAME}: {setting}, {env['server']}, {env['cpu_count']} CPUs, "
          f"Python {env['python']}")
    print(text)
    if args.json:
        report.write_json(args.json, {
            "scenario": scenario.NAME, "seed": scenario.SEED, "argv": sys.argv[1:] if argv is None else argv,
            "target": _describe(url), "rows": args.rows, "pool_size": args.pool_size,
            "repeat": args.repeat, "options": args.options, "started": started,
            "environment": env, "summary": summary, "unavailable": unavailable,
            "runs": [vars(r) for r in runs]})
        print(f"\nJSON: {args.json}")
    title = f"{scenario.NAME}, {setting},\n{short_server(env['server'])}, {env['cpu_count']} CPUs"
    if args.plot:
        if hasattr(scenario, "plot"):
            scenario.plot(args.plot, summary, title, args.options)
        else:
            report.plot(args.plot, summary, title, args.fields)
        print(f"chart: {args.plot}")
    if args.html:
        report.html(args.html, title, text, env, summary, args.fields)
        print(f"HTML report: {args.html}")
    if args.dburl is None and getattr(scenario, "USES_DATABASE", True):
        print("\nThat was the embedded default (SQLite). Compare on a server with\n"
              "  python -m benchmarks --dburl postgresql://user@127.0.0.1/test --repeat 3\n"
              "  python -m benchmarks --dburl mysql://user@127.0.0.1/test --repeat 3")
    if tmpdir:
        tmpdir.cleanup()
    return 1 if any(not r.ok for r in runs) else 0


def plan(scenario, roster, kind, args):
    """The entries to run (``harness.Entry``) and {name: reason} for those that
    cannot run here: the system cannot (a missing module, the wrong server), the
    scenario cannot (a missing tool), or the scenario rules out that system in
    one of its variants."""
    blocked = scenario.unavailable_reason() if hasattr(scenario, "unavailable_reason") else None
    matrix, unavailable = [], {}
    for entry in harness.entries(args.system_names, args.pool_size, args.variants):
        system = roster[entry.system]
        reason = blocked or system.unavailable(kind, scenario.NAME)
        if reason:  # one line for the system, not one per entry
            unavailable.setdefault(entry.system, reason)
        elif hasattr(scenario, "variant_unavailable") and (
                reason := scenario.variant_unavailable(system, kind,
                                                       {**args.options, **entry.options})):
            unavailable[entry.name] = reason
        else:
            matrix.append(entry)
    return matrix, unavailable


def _setting(scenario, args):
    """What this run was, in one line: its size, or the scenario's own options."""
    if hasattr(scenario, "launch"):
        return ", ".join(f"{k} {v}" for k, v in args.options.items()) + \
            f", pool {_pools(args)}, {args.repeat} round(s)"
    return (f"{args.rows:,} {getattr(scenario, 'ROWS_ARE', 'rows')}, pool {_pools(args)}, "
            f"{args.repeat} round(s)")


def _pools(args):
    return ",".join(map(str, args.pool_size))


def short_server(version):
    """'PostgreSQL 15.20', '10.11.19-MariaDB', 'SQLite 3.40.1': enough for a chart title."""
    words = version.split()
    if words and words[0][0].isdigit():  # MariaDB: '10.11.19-MariaDB-0+deb12u1'
        return "-".join(words[0].split("-")[:2])
    return " ".join(words[:2])


def _describe(url):
    return mongo.describe(url) if mongo.is_mongo(url) else parse_url(url).describe()
