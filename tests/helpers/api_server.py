"""The API served by uvicorn on a loopback port in a thread, as ``ftpipe serve-api`` serves it."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import uvicorn


@contextmanager
def serving(app):
    """Yields the base URL (``http://127.0.0.1:<port>``) while the app is served."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the API server did not start")
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
