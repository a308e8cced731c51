"""A tenant's webhook endpoint for tests: a real HTTP server that verifies each delivery's signature."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ftpipe.notify.webhooks import verify

SECRET = "whsec-test-secret"


@pytest.fixture
def receiver():
    """(url, received, statuses): answers with the queued status codes, then 200; keeps what it verified."""
    received, statuses = [], []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append({"headers": dict(self.headers), "body": body,
                             "verified": verify(SECRET, self.headers, body)})
            self.send_response(statuses.pop(0) if statuses else 200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/hook", received, statuses
    server.shutdown()
