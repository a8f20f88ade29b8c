"""Run the inspector on a free 127.0.0.1 port in a background thread (tests, notebooks)."""

from __future__ import annotations

import queue
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from ..errors import ConfigurationError

__all__ = ["background_server", "free_port", "read_line", "stop_process"]


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (another process may take it before you bind it)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def read_line(stream: IO[str], timeout: float) -> str:
    """The next line of a child's pipe, else `ConfigurationError` after `timeout` s
    (read in a daemon thread, so a silent child cannot block the caller)."""
    lines: queue.Queue[str] = queue.Queue(maxsize=1)
    reader = threading.Thread(
        target=lambda: lines.put(stream.readline()), name="langmem-trpc-readline", daemon=True
    )
    reader.start()
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        raise ConfigurationError(f"no line from the process within {timeout:g} s") from None


def stop_process(proc: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """SIGTERM, wait up to `timeout` s, then SIGKILL and reap: no child outlives its caller."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


@contextmanager
def background_server(app: Any, host: str = "127.0.0.1", timeout: float = 20.0) -> Iterator[str]:
    """Serve `app` with uvicorn in a thread; yields its base URL, stops it on exit.

    The socket is bound before the thread starts (no other process can take the
    port); shutdown gives connections 5 s, then forces, joined within `timeout` s.
    """
    import uvicorn

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="langmem-trpc-ui", daemon=True
    )
    thread.start()
    try:
        deadline = time.monotonic() + timeout
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise ConfigurationError(f"the UI server did not start on {host}:{port}")
            time.sleep(0.02)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout)
        if thread.is_alive():
            server.force_exit = True
            thread.join(5.0)
        sock.close()
