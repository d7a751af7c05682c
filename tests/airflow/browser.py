"""Headless Chromium driven over the DevTools protocol, with nothing but ``websockets``.

Enough of CDP for page tests: navigate, evaluate JavaScript, type into the focused element,
capture a full-page screenshot. Each browser gets its own profile folder, so sessions never
leak between tests. Chromium runs in its own process group, stopped by its pid on close.
"""
from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

CHROMIUM = "/usr/bin/chromium"
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--no-first-run", "--no-default-browser-check",
    "--hide-scrollbars", "--mute-audio",
)
#: How long one start may take to write its DevTools port (0.25 s here when idle, 3.8 s cold).
STARTUP_TIMEOUT = 60.0


def chromium_binary() -> str | None:
    return CHROMIUM if os.access(CHROMIUM, os.X_OK) else shutil.which("chromium")


class BrowserError(RuntimeError):
    pass


class Browser:
    def __init__(self, profile: Path, log_file: Path, width: int = 1400, height: int = 1000) -> None:
        binary = chromium_binary()
        if binary is None:
            raise BrowserError("Chromium is not installed: run scripts/install-chromium.sh")
        profile.mkdir(parents=True, exist_ok=True)
        self.log_file = log_file
        self.proc = self._launch(binary, profile, width, height)
        self._ids = itertools.count(1)
        self._stack = ExitStack()
        try:
            port, path = self._devtools_address(profile / "DevToolsActivePort")
            if port is None:
                # A loaded two-core machine has once kept Chromium from writing its port for 30 s
                # (CI, 2026-12-01): start it once more before calling the browser broken.
                self._stop_process()
                self.proc = self._launch(binary, profile, width, height)
                port, path = self._devtools_address(profile / "DevToolsActivePort")
            if port is None:
                raise BrowserError(f"Chromium did not open its DevTools port in two starts of "
                                   f"{STARTUP_TIMEOUT:g} s; the end of {self.log_file}:\n{self._log_tail()}")
            self.ws = self._stack.enter_context(
                connect(f"ws://127.0.0.1:{port}{path}", max_size=64 * 1024 * 1024, open_timeout=30))
            target = self._call("Target.createTarget", {"url": "about:blank"})["targetId"]
            self.session = self._call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            self.send("Page.enable")
            self.send("Runtime.enable")
            self.send("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        except BaseException:
            self.close()
            raise

    def _launch(self, binary: str, profile: Path, width: int, height: int) -> subprocess.Popen[bytes]:
        (profile / "DevToolsActivePort").unlink(missing_ok=True)
        with open(self.log_file, "ab") as log:
            return subprocess.Popen(
                [binary, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
                 f"--window-size={width},{height}", "about:blank"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )

    def _devtools_address(self, file: Path) -> tuple[str, str] | tuple[None, None]:
        """The port and path Chromium wrote, or (None, None) if it wrote none in STARTUP_TIMEOUT."""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrowserError(f"Chromium exited with {self.proc.returncode}; the end of "
                                   f"{self.log_file}:\n{self._log_tail()}")
            lines = file.read_text().splitlines() if file.exists() else []
            if len(lines) >= 2:
                return lines[0], lines[1]
            time.sleep(0.1)
        return None, None

    def _log_tail(self, lines: int = 20) -> str:
        """The log's last lines, so the failure says why even after pytest removes its folder."""
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError as exc:
            return f"(unreadable: {exc})"

    # ---- protocol -------------------------------------------------------------------------------
    def _call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
              timeout: float = 60.0) -> dict[str, Any]:
        message_id = next(self._ids)
        message: dict[str, Any] = {"id": message_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrowserError(f"no answer to {method} within {timeout:g} s")
            reply = json.loads(self.ws.recv(timeout=remaining))
            if reply.get("id") != message_id:
                continue  # an event; these tests poll the page state instead
            if "error" in reply:
                raise BrowserError(f"{method} failed: {reply['error']}")
            return reply.get("result", {})

    def send(self, method: str, params: dict[str, Any] | None = None, timeout: float = 60.0) -> dict[str, Any]:
        return self._call(method, params, self.session, timeout)

    # ---- page -----------------------------------------------------------------------------------
    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, what: str, timeout: float = 30.0) -> Any:
        """Poll a JavaScript expression until it is truthy; say what was awaited if it never is."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = self.evaluate(expression)
            except BrowserError as exc:
                last = exc
            if last and not isinstance(last, BrowserError):
                return last
            time.sleep(0.25)
        raise BrowserError(f"timed out after {timeout:g} s waiting for {what} (last: {last!r}, "
                           f"at {self.location()})")

    def navigate(self, url: str, timeout: float = 30.0) -> None:
        result = self.send("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise BrowserError(f"navigation to {url} failed: {result['errorText']}")
        self.wait_for("document.readyState === 'complete'", f"{url} to load", timeout)

    def location(self) -> str:
        try:
            return str(self.evaluate("location.href"))
        except BrowserError:
            return "?"

    def text(self) -> str:
        return self.evaluate("document.body ? document.body.innerText : ''") or ""

    def type_into(self, selector: str, text: str) -> None:
        """Focus an input and type as a user would, so React's controlled inputs see the change."""
        self.wait_for(f"document.querySelector({json.dumps(selector)}) !== null", f"input {selector}")
        self.evaluate(f"document.querySelector({json.dumps(selector)}).focus()")
        self.send("Input.insertText", {"text": text})

    def screenshot(self, path: Path) -> Path:
        """A PNG of the whole page, not only the viewport."""
        size = self.send("Page.getLayoutMetrics")["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 8000), "scale": 1}
        shot = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            try:
                self._call("Browser.close", timeout=5)
            except Exception:  # noqa: BLE001 - the process is stopped below anyway
                pass
            self._stack.close()
        self._stop_process()

    def _stop_process(self) -> None:
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        # Chromium's helpers (zygote, renderers) share the group we started it in; stop any left over.
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(0.5)
        self.proc.wait(timeout=10)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
