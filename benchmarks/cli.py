"""``python -m benchmarks`` (``adb-benchmark`` once installed): options, system
selection, the run, the report.

With no options: the parallel-insert scenario on the embedded default (SQLite in
a temporary file), every system that can run on it, once. The 2011 benchmark's
options (``--db --dbhost --dbpasswd --dbuser --pool_size --use_adb --use_adbapi
--use_tornado --use_txmysql``) still work beside ``--dburl`` and friends.

A wrong option or a database the run cannot use (a bad URL, a refused login, a
server that does not answer), or a ``--python`` interpreter that cannot run the
systems (missing, cannot import adb, lacks the URL's driver), is one line on
stderr and exit status 2, before any work. The scenario's tables (``adb_bench_*``) are dropped at the end of the run,
also when it fails or is interrupted, unless ``--keep``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import logging
import os
import sys
import tempfile
import time
from typing import Any, Iterator, Mapping, NoReturn, Optional, Sequence
from urllib.parse import quote

from adb import drivers
from adb.errors import ConnectionRejected, ServerUnavailable
from adb.errors import Error as AdbError
from adb.url import parse_url

from . import harness, interpreters, mongo, report
from .harness import Entry, Run
from .interpreters import THIS, Interpreter
from .progress import ProgressUI
from .report import Summary
from .scenarios import SCENARIOS, scenario_for
from .scenarios.base import Scenario
from .systems import SYSTEMS, Entrant, System
from .systems.common import kind_of

EMBEDDED_HINT = """
That was the embedded default (SQLite). Compare on a server with
  {prog} --dburl postgresql://user@127.0.0.1/test --repeat 3
  {prog} --dburl mysql://user@127.0.0.1/test --repeat 3"""
DESCRIPTION = ("adb against its peers on published experiments, first among them the 2011 "
               "one: 100,000 parallel inserts through a pool of 10 connections. Every run is "
               "verified. What each scenario measures, and results on PostgreSQL and MariaDB: "
               "the Benchmarks page of adb's documentation (docs/benchmarks.md in the source "
               "distribution).")
EPILOG = ("In the --dburl database a run creates its scenario's tables, all named adb_bench_* "
          "(dropping any tables of those names first), and drops them when it ends, also when "
          "it fails or is interrupted; --keep keeps them. It touches no other table.")
#: how to get what a run needs beyond adb itself
BENCH_EXTRA = "pip install 'adb-async[bench]' (in a checkout: pip install -e '.[bench]')"


class Parser(argparse.ArgumentParser):
    """argparse's parser, saying a wrong option in one line (not the 30-line usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (--help lists the options)\n")


def parser(prog: Optional[str] = None) -> argparse.ArgumentParser:
    p = Parser(prog=prog, description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("--scenario", default="parallel-insert", choices=sorted(SCENARIOS))
    p.add_argument("--dburl", help="database URL (postgresql://, mysql://, sqlite:///; "
                   "mongodb:// for sequential and mongo-tasks); default: SQLite in a temporary file")
    p.add_argument("--systems", help="comma-separated systems (default: all available); see --list")
    p.add_argument("--rows", type=int, default=None,
                   help="rows to insert (100000 on a server; 20000 on the embedded default, "
                        "so a first run takes about a minute)")
    p.add_argument("--repeat", type=int, default=1,
                   help="interleaved rounds (1: one figure per system, no median or spread; "
                        "3 or more for median (min-max))")
    p.add_argument("--pool_size", "--pool-size", type=pool_sizes, default=None,
                   help="connections per system (10, or the scenario's own default); "
                        "a list (15,120,350) runs every system at each size")
    p.add_argument("--json", metavar="FILE", help="write every raw figure and the environment")
    p.add_argument("--plot", metavar="FILE", help="write a chart (.png or .svg)")
    p.add_argument("--html", metavar="FILE", help="write an HTML report (table, chart, environment)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per run before it fails")
    p.add_argument("--keep", action="store_true",
                   help="keep the scenario's adb_bench_* tables after the run (default: dropped)")
    p.add_argument("--python", metavar="NAME=PATH", action="append", type=interpreter,
                   default=[], dest="pythons",
                   help="run every system on this interpreter too, its rows named "
                        "system@NAME (repeatable: a GIL and a free-threaded build side by "
                        "side); only the named ones run then; each needs the drivers installed")
    p.add_argument("--list", action="store_true", help="list systems and scenarios, then exit")
    for name, scenario in sorted(SCENARIOS.items()):
        if scenario.add_arguments is not None:
            scenario.add_arguments(p.add_argument_group(_group_title(name)))
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


def _group_title(name: str) -> str:
    return f"the {name} scenario's options"


def parse(argv: Sequence[str], prog: Optional[str] = None) -> argparse.Namespace:
    """The options, checked, with what they imply: ``dburl`` (from the 2011 flags
    too), ``kind``, ``scenario_record``, ``rows`` and ``pool_size`` (the scenario's
    defaults where not given), the scenario's own ``options``, its ``fields`` and
    ``variants``, and ``system_names``."""
    p = parser(prog)
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
        scenario = args.scenario_record = scenario_for(args.scenario, args.kind)
    except ValueError as exc:
        p.error(str(exc))
    if args.rows is None:
        args.rows = scenario.default_rows or (100_000 if args.dburl else 20_000)
    if args.pool_size is None:
        args.pool_size = list(scenario.default_pool_sizes)
    if args.rows < 1 or args.repeat < 1:
        p.error("--rows and --repeat must be positive")
    args.options = {a.dest: getattr(args, a.dest) for a in _scenario_arguments(p, scenario)}
    try:
        args.fields = scenario.report_fields(args.options)
        args.variants = scenario.variants(args.options)
    except ValueError as exc:
        p.error(str(exc))
    args.system_names = selected_systems(p, args, scenario)
    names = [python.name for python in args.pythons]
    if len(set(names)) < len(names):
        p.error(f"--python names must differ: {', '.join(names)}")
    return args


def interpreter(text: str) -> Interpreter:
    """``--python NAME=PATH`` (``interpreters.parse``)."""
    try:
        return interpreters.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc))


def _scenario_arguments(p: argparse.ArgumentParser, scenario: Scenario) -> list[argparse.Action]:
    """The options ``scenario`` added to the parser (its argument group's)."""
    for group in p._action_groups:
        if group.title == _group_title(scenario.name):
            return group._group_actions
    return []


def pool_sizes(text: str) -> list[int]:
    """``--pool_size``: one size or a comma-separated list of them, each positive."""
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number or numbers, not {text!r}")
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"must be positive, not {text!r}")
    return sizes


def selected_systems(p: argparse.ArgumentParser, args: argparse.Namespace,
                     scenario: Scenario) -> list[str]:
    """The systems named by the seed's flags and ``--systems``, checked against the
    scenario's roster; none named: the scenario's defaults (its whole roster unless
    it says otherwise)."""
    roster = scenario.roster
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
    return list(dict.fromkeys(names)) or list(scenario.default_systems or roster)


def main(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> int:
    """``python -m benchmarks`` (``prog``; default: the command's own name, as
    ``adb-benchmark``): parse, list or run, report; 1 if any run failed, 2 if the
    options are wrong, the database cannot be used or what the run needs is not
    installed, 130 if interrupted."""
    argv = sys.argv[1:] if argv is None else list(argv)
    prog = prog or os.path.basename(sys.argv[0])
    args = parse(argv, prog)
    if args.list:
        print_list()
        return 0
    missing = missing_modules(args)
    if missing:  # before any work: nothing is created, nothing runs
        print(f"{prog}: this run needs {' and '.join(missing)}, which the benchmark's extra "
              f"installs: {BENCH_EXTRA}", file=sys.stderr)
        return 2
    with database(args.dburl) as url:
        problem = unusable(url, args.scenario_record)
        try:
            probed = probe(args, url) if not problem else {}
        except interpreters.Unusable as exc:
            problem = str(exc)
        if problem:  # before any work: nothing is created, nothing runs
            print(f"{prog}: {problem}", file=sys.stderr)
            return 2
        try:
            outcome = measure(args, url, probed)
        except KeyboardInterrupt:
            print(f"\n{prog}: interrupted", file=sys.stderr)
            return 130
        finally:
            tables = own_tables(args, url)
            if tables and not args.keep:
                drop_tables(prog, url, tables)
        show(outcome)
        write_files(args, argv, outcome)
        if args.dburl is None and args.scenario_record.uses_database:
            print(EMBEDDED_HINT.format(prog=prog))
        elif tables:
            print(f"\ntables: {', '.join(tables)} "
                  + ("kept (--keep)" if args.keep else "dropped at the end of the run (kept with --keep)"))
    return 1 if any(not r.ok for r in outcome.runs) else 0


@contextlib.contextmanager
def adb_quiet() -> Iterator[None]:
    """adb's own log lines (a failed connect, a retry) kept off the terminal: the
    CLI says what went wrong itself, in one line."""
    log = logging.getLogger("adb")
    was, log.disabled = log.disabled, True
    try:
        yield
    finally:
        log.disabled = was


def unusable(url: str, scenario: Scenario) -> Optional[str]:
    """Why the run cannot use ``url``, in one line saying what to fix, or None:
    one connection opened and ``select 1`` run before anything else."""
    if not scenario.uses_database or mongo.is_mongo(url):
        return None
    import adb.sync
    target = _describe(url)
    try:
        with adb_quiet(), adb.sync.Database(url, pool_size=1) as db:
            db.runQuery("select 1")
    except ConnectionRejected as exc:
        return (f"{target} refused the connection: {exc.reason}; check the user, password "
                "and database name in --dburl")
    except ServerUnavailable as exc:
        return (f"cannot reach {target}: {_first_line(exc.__cause__ or exc)}; check that the "
                "server is running and the host and port in --dburl")
    except AdbError as exc:
        return f"cannot use {target}: {_first_line(exc)}; fix --dburl"
    return None


def probe(args: argparse.Namespace, url: str) -> dict[str, dict[str, Any]]:
    """``interpreters.probe`` of every ``--python``, by name (none: {}); Unusable
    names the first that cannot run this run's systems."""
    return {python.name: interpreters.probe(python, args.scenario, url, args.system_names)
            for python in args.pythons}


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0].strip()


def own_tables(args: argparse.Namespace, url: str) -> tuple[str, ...]:
    """The tables this run creates in a database that outlives it: none on the
    embedded default (its file goes with the run) or MongoDB."""
    if args.dburl is None or mongo.is_mongo(url):
        return ()
    scenario: Scenario = args.scenario_record
    return scenario.tables


def drop_tables(prog: str, url: str, tables: Sequence[str]) -> None:
    """Drop ``tables``; a failure is a line on stderr (naming them), not an error."""
    import adb.sync
    try:
        with adb_quiet(), adb.sync.Database(url, pool_size=1) as db:
            for table in tables:
                db.runOperation(f"drop table if exists {table}")
    except Exception as exc:  # the run's outcome matters more than its tidying up
        print(f"{prog}: could not drop {', '.join(tables)}: {_first_line(exc)}", file=sys.stderr)


def missing_modules(args: argparse.Namespace) -> list[str]:
    """What this run needs that is not installed: tqdm for any run (the progress
    bars), matplotlib for ``--plot`` (the chart; ``--html`` does without). A system
    whose own client is missing is not among them: it is reported as unavailable."""
    needed = ["tqdm"] + (["matplotlib"] if args.plot else [])
    return [name for name in needed if importlib.util.find_spec(name) is None]


def print_list() -> None:
    """``--list``: every scenario, and the systems of each roster (the SQL systems
    once, under parallel-insert)."""
    for name, scenario in SCENARIOS.items():
        print(f"scenario {name}: {scenario.description}"
              + (" (and on MongoDB: the MongoDB clients of mongo-tasks)"
                 if name == "sequential" else ""))
        if scenario.roster is not SYSTEMS or name == "parallel-insert":
            for system_name, system in scenario.roster.items():
                print(f"  {system_name:<22} {system.label}; databases: "
                      f"{', '.join(system.kinds)}" + (f"; {system.note}" if system.note else ""))


@contextlib.contextmanager
def database(dburl: Optional[str]) -> Iterator[str]:
    """``dburl``, or SQLite in a temporary file removed afterwards."""
    if dburl is not None:
        yield dburl
        return
    with tempfile.TemporaryDirectory(prefix="adb-bench-") as tmpdir:
        yield f"sqlite:///{tmpdir}/bench.db"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a run of the CLI found: every run, their summary, what could not run,
    the environment, and the report's table and chart title."""

    scenario: Scenario
    url: str
    setting: str
    started: float
    runs: list[Run]
    summary: Summary
    unavailable: dict[str, str]
    env: dict[str, Any]
    text: str
    title: str


def measure(args: argparse.Namespace, url: str,
            probed: Optional[Mapping[str, Mapping[str, Any]]] = None) -> Outcome:
    """Plan the runs, make them (interleaved, each verified), summarise them, and
    read the environment. ``probed``: what each ``--python`` said of itself."""
    scenario = args.scenario_record
    matrix, unavailable = plan(scenario, kind_of(url), args, probed or {})
    started = time.time()
    setting = _setting(scenario, args)
    print(f"{scenario.name}: {setting} on {_describe(url)}", file=sys.stderr)
    ui = ProgressUI(max((len(e.name) for e in matrix), default=10), args.fields[0])
    runs = harness.run_matrix(matrix, scenario, url, args.rows, args.repeat, args.timeout, ui,
                              args.options)
    summary = harness.summary_of(runs)
    env = environment(scenario, url)
    if probed:
        env["interpreters"] = {name: {k: v for k, v in found.items() if k != "unavailable"}
                               for name, found in probed.items()}
    text = report.table(summary, unavailable, args.fields, scenario.baselines, scenario.roster)
    title = f"{scenario.name}, {setting},\n{short_server(env['server'])}, {env['cpu_count']} CPUs"
    return Outcome(scenario, url, setting, started, runs, summary, unavailable, env, text, title)


def environment(scenario: Scenario, url: str) -> dict[str, Any]:
    """The report's environment, with the scenario's tools and, for a scenario
    that touches no database, no server."""
    env = report.environment(url, kind_of(url))
    if not scenario.uses_database:
        env["server"] = "no database"
    if scenario.tools is not None:
        env["tools"] = scenario.tools()
    return env


def show(outcome: Outcome) -> None:
    """The table on stdout, under a line saying what ran where."""
    env = outcome.env
    print()
    print(f"{outcome.scenario.name}: {outcome.setting}, {short_server(env['server'])}, "
          f"{env['cpu_count']} CPUs, Python {env['python']}")
    for name, found in env.get("interpreters", {}).items():
        print(f"  @{name}: Python {found['python']} ({found['executable']})"
              + (", free-threaded, GIL " + ("on" if found["gil_enabled"] else "off")
                 if found["free_threaded"] else "") + f", adb from {found['adb']}")
    print(outcome.text)


def write_files(args: argparse.Namespace, argv: Sequence[str], outcome: Outcome) -> None:
    """``--json``, ``--plot`` and ``--html``, where asked for."""
    scenario = outcome.scenario
    if args.json:
        report.write_json(args.json, {
            "scenario": scenario.name, "seed": scenario.seed, "argv": argv,
            "target": _describe(outcome.url), "rows": args.rows, "pool_size": args.pool_size,
            "repeat": args.repeat, "options": args.options, "started": outcome.started,
            "environment": outcome.env, "summary": outcome.summary,
            "unavailable": outcome.unavailable, "runs": [vars(r) for r in outcome.runs]})
        print(f"\nJSON: {args.json}")
    if args.plot:
        if scenario.plot is not None:
            scenario.plot(args.plot, outcome.summary, outcome.title, args.options)
        else:
            report.plot(args.plot, outcome.summary, outcome.title, args.fields)
        print(f"chart: {args.plot}")
    if args.html:
        report.html(args.html, outcome.title, outcome.text, outcome.env, outcome.summary,
                    args.fields)
        print(f"HTML report: {args.html}")


def plan(scenario: Scenario, kind: str, args: argparse.Namespace,
         probed: Optional[Mapping[str, Mapping[str, Any]]] = None
         ) -> tuple[list[Entry], dict[str, str]]:
    """The entries to run (``harness.Entry``) and {name: reason} for those that
    cannot run here: the system cannot (a missing module, the wrong server; on a
    ``--python`` interpreter, as it said of itself in ``probed``), the scenario
    cannot (a missing tool), or the scenario rules out that system in one of its
    variants."""
    blocked = scenario.unavailable_reason()
    matrix: list[Entry] = []
    unavailable: dict[str, str] = {}
    pythons: list[Interpreter] = args.pythons or [THIS]
    for entry in harness.entries(args.system_names, args.pool_size, args.variants, pythons):
        system = scenario.roster[entry.system]
        reason = blocked or (probed[entry.python.name]["unavailable"][entry.system]
                             if probed and entry.python.name
                             else system.unavailable(kind, scenario.name))
        if reason:  # one line for the system, not one per entry
            unavailable.setdefault(entry.python.label(entry.system), reason)
        elif reason := _variant_unavailable(scenario, system, kind,
                                            {**args.options, **entry.options}):
            unavailable[entry.name] = reason
        else:
            matrix.append(entry)
    return matrix, unavailable


def _variant_unavailable(scenario: Scenario, system: Entrant, kind: str,
                         options: Mapping[str, Any]) -> Optional[str]:
    """Why the scenario rules ``system`` out of a variant; only a SQL system can be
    (a launched scenario's servers have no variants)."""
    if not isinstance(system, System):
        return None
    return scenario.variant_unavailable(system, kind, dict(options))


def _setting(scenario: Scenario, args: argparse.Namespace) -> str:
    """What this run was, in one line: its size, or the scenario's own options."""
    if scenario.run is None:  # launched or driven: its options say what it was
        return ", ".join(f"{k} {v}" for k, v in args.options.items()) + \
            f", pool {_pools(args)}, {args.repeat} round(s)"
    return f"{args.rows:,} {scenario.rows_are}, pool {_pools(args)}, {args.repeat} round(s)"


def _pools(args: argparse.Namespace) -> str:
    return ",".join(map(str, args.pool_size))


def short_server(version: str) -> str:
    """'PostgreSQL 15.20', 'MariaDB 10.11.19', 'MySQL 8.0.36', 'SQLite 3.40.1': the
    server's name and version, for the report's header and the chart's title (the
    JSON keeps the whole ``version()``)."""
    words = version.split()
    if words and words[0][0].isdigit():  # MariaDB: '10.11.19-MariaDB-0+deb12u1'
        number, _, rest = words[0].partition("-")
        return f"{'MariaDB' if rest.startswith('MariaDB') else 'MySQL'} {number}"
    return " ".join(words[:2])


def _describe(url: str) -> str:
    return mongo.describe(url) if mongo.is_mongo(url) else parse_url(url).describe()
