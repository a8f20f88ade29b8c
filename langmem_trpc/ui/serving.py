"""Run the inspector on a free 127.0.0.1 port in a background thread (tests, notebooks)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import ConfigurationError

__all__ = ["background_server", "free_port"]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def background_server(app: Any, host: str = "127.0.0.1", timeout: float = 20.0) -> Iterator[str]:
    """Serve `app` with uvicorn in a thread; yields its base URL, stops it on exit."""
    import uvicorn

    config = uvicorn.Config(app, host=host, port=free_port(host), log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="langmem-trpc-ui", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise ConfigurationError(f"the UI server did not start on {host}:{config.port}")
        time.sleep(0.02)
    try:
        yield f"http://{host}:{config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout)
