# twistd -n -y app.tac: the adbapi drop-in, a sleep query at start-up when asked,
# and the reactor's shutdown (SIGTERM, SIGINT) closing the pool. The pool's close
# waits for the calls running, and a cancelled Deferred does not stop its call, both
# as adbapi's (docs/adbapi.md): so the server bounds every statement (3 s), or a
# long one would hold the exit until it ended.
import os

from twisted.application import service
from twisted.internet import reactor

from adb.twisted import ConnectionPool

url_app = os.environ["ADB_DEPLOY_APP"]
# the module by name, as adbapi takes it: psycopg2, or psycopg where psycopg2 cannot load
# (the free-threaded build)
pool = ConnectionPool(os.environ.get("ADB_DEPLOY_DBAPI", "psycopg2"), host="127.0.0.1",
                      user="root", dbname="test", application_name=url_app,
                      options="-c statement_timeout=3000", cp_min=2, cp_max=4)


def started():
    pool.runQuery("select 1")
    pool.runQuery(os.environ["ADB_DEPLOY_SLEEP"]).addErrback(lambda failure: None)


reactor.callWhenRunning(started)
application = service.Application("adb-deploy")
