"""Serve a run directory on localhost, so that its report (and its other files) open in a browser."""

from __future__ import annotations

import contextlib
import functools
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # one line per request would bury the URL
        pass


def serve(run_dir: str | Path, page: str, port: int = 8000, host: str = "127.0.0.1") -> None:
    """Serve `run_dir` at http://host:port/ until Ctrl-C, printing the address of `page` (a file in it).
    Port 0 takes any free port."""
    handler = functools.partial(_QuietHandler, directory=str(run_dir))
    try:
        server = ThreadingHTTPServer((host, port), handler)
    except OSError as error:
        message = f"cannot serve on {host}:{port} ({error.strerror}): pick another port with --port N (0 = any)"
        raise OSError(message) from error
    with server:
        bound_host, bound_port = server.server_address[:2]
        print(f"serving {run_dir} at http://{bound_host}:{bound_port}/{page}  (Ctrl-C to stop)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how one stops it
            server.serve_forever()
