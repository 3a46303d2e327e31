"""gunicorn's settings for the WSGI recipe's app (docs/recipes.md)."""

workers = 2
threads = 4
graceful_timeout = 4  # a gthread worker may wait this long for an idle keep-alive socket on SIGTERM


def post_fork(server, worker):
    import wsgi
    wsgi.open_database()


def worker_exit(server, worker):
    import wsgi
    wsgi.close_database()
