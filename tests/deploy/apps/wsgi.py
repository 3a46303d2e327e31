"""The WSGI recipe's app (docs/recipes.md), for gunicorn's gthread workers: a Database
per worker, made in post_fork, closed in worker_exit. Under --preload, a Database is
also made at import in the master and closed with atexit: every worker inherits it,
and its close() in the worker must return at once."""

import atexit
import json
import os

import adb.sync
from gunicorn_conf import graceful_timeout

#: below graceful_timeout, with a second to spare for the cancel and the exit
STATEMENT_TIMEOUT = graceful_timeout - 1.0

URL = os.environ["ADB_DEPLOY_URL"]
THREADS = int(os.environ.get("THREADS", "4"))
db = None  # this process's Database: made after the fork, in open_database()

if os.environ.get("ADB_DEPLOY_PRELOADED"):
    preloaded = adb.sync.Database(URL, pool_size=2)
    preloaded.runQueryValue("select 1")
    atexit.register(preloaded.close)


def open_database():
    global db
    # On SIGTERM a gthread worker waits graceful_timeout for the requests in flight,
    # then the master kills it (SIGKILL): a statement still running then is left to
    # run to its end on the server. So every statement is bounded below that.
    db = adb.sync.Database(URL, pool_size=THREADS, statement_timeout=STATEMENT_TIMEOUT)


def close_database():
    if db is not None:
        db.close()


def application(environ, start_response):
    if environ["PATH_INFO"] == "/sleep":
        value = db.runQueryValue(os.environ["ADB_DEPLOY_SLEEP"])
    else:
        value = db.runQueryValue("select 1")
    body = json.dumps({"process": os.getpid(), "value": str(value)}).encode()
    start_response("200 OK", [("Content-Type", "application/json"),
                              ("Content-Length", str(len(body)))])
    return [body]
