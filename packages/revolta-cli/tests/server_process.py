"""Start ``revolta serve`` as a real process on 127.0.0.1 (a free port) and stop it with a signal."""

from __future__ import annotations

import os
import re
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.request

_URL = re.compile(r"Serving the OpenAI-compatible API at (https?://\S+)/v1")


class ServerProcess:
    """A running ``revolta serve``; ``url`` is its base URL, ``output`` every line it printed so far."""

    def __init__(self, *args: str, startup_timeout: float = 240.0, env: dict | None = None) -> None:
        command = [sys.executable, "-m", "revolta_cli.main", "serve", "--port", "0", *args]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, **(env or {})}, start_new_session=True)
        self.output: list[str] = []
        self._url_found = threading.Event()
        self.url = ""
        threading.Thread(target=self._drain, daemon=True).start()
        deadline = time.monotonic() + startup_timeout
        # The URL is printed just before uvicorn starts listening: wait until /health answers too.
        if not (self._url_found.wait(startup_timeout) and self.url
                and wait_until(self._healthy, timeout=max(deadline - time.monotonic(), 1.0))):
            self.stop()
            raise RuntimeError("revolta serve did not start:\n" + "".join(self.output[-40:]))

    def _healthy(self) -> bool:
        if self.proc.poll() is not None:
            return True  # died: stop waiting; the caller's first request will show why
        try:
            # an HTTPS test server's certificate is the test's own: the probe only asks whether it answers
            context = ssl._create_unverified_context() if self.url.startswith("https") else None
            with urllib.request.urlopen(self.url.removesuffix("/v1") + "/health", timeout=5,
                                        context=context) as resp:
                return resp.status == 200
        except OSError:
            return False

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            match = _URL.search(line)
            if match and not self._url_found.is_set():
                self.url = match.group(1)
                self._url_found.set()
        self._url_found.set()

    @property
    def text(self) -> str:
        """Everything printed so far."""
        return "".join(self.output)

    def children(self) -> list[int]:
        """Process ids of the server's child processes (engine core, resource tracker)."""
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.proc.pid)], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        """Send ``sig`` and wait for the exit code (kill the group if it hangs, and fail)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                raise RuntimeError("revolta serve did not stop within the timeout") from None
        return self.proc.returncode


def pid_alive(pid: int) -> bool:
    """True while process ``pid`` exists (zombies excluded)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.2) -> bool:
    """Poll ``predicate`` until true or ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
