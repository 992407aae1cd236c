"""A real `chroma run` server subprocess that a test can kill and start again on the same folder and port."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def chroma_executable() -> str | None:
    local = Path(sys.executable).with_name("chroma")
    return str(local) if local.exists() else shutil.which("chroma")


class ChromaServer:
    """``chroma run --path path --port port`` on loopback; ``start`` waits until it accepts connections."""

    def __init__(self, path: Path, port: int | None = None, executable: str | None = None):
        self.path, self.port = Path(path), port or free_port()
        self.executable = executable or chroma_executable()
        self.process: subprocess.Popen | None = None

    def start(self, timeout_s: float = 60.0) -> ChromaServer:
        self.process = subprocess.Popen(
            [self.executable, "run", "--path", str(self.path), "--host", "127.0.0.1", "--port", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "ANONYMIZED_TELEMETRY": "False"},
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    code = self.process.poll()
                    self.stop()
                    raise RuntimeError(f"chroma run did not start on port {self.port} (exit code {code})") from None
                time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill would end it: no shutdown of its own."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
