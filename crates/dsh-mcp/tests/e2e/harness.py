"""A small test runner and helpers for driving the MCP server with the `mcp` client package.

Each test is an async function taking no arguments; `run()` runs them in order, prints
`PASS/FAIL/SKIP <name>` lines and a closing `N passed, N failed, N skipped` line, and
returns the exit status (1 when any test failed).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import socket
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Awaitable, Callable

import mcp_types as types
from mcp import Client as _Client
from mcp.client.stdio import StdioServerParameters

SERVER = shlex.split(os.environ.get("DSH_MCP_SERVER", ""))
TEST_TIMEOUT = 120.0
# How clients connect: "legacy" (the `initialize` handshake, 2025-11-25) unless a test file
# sets "auto" (probe `server/discover`, then speak 2026-07-28 without `initialize`).
MODE = "legacy"
# The revision every connection must end up speaking, when a test file requires one (a
# server that cannot speak it would otherwise pass on the client's fallback).
REQUIRE_REVISION: str | None = None


class _Checked(_Client):
    async def __aenter__(self) -> "_Checked":
        client = await super().__aenter__()
        if REQUIRE_REVISION is not None and client.protocol_version != REQUIRE_REVISION:
            await client.__aexit__(None, None, None)
            raise AssertionError(f"the client speaks {client.protocol_version}, not {REQUIRE_REVISION}")
        return client


def Client(*args: Any, **kwargs: Any) -> _Client:  # noqa: N802 (stands in for the class)
    """The `mcp` client, connecting in `MODE` unless told otherwise."""
    kwargs.setdefault("mode", MODE)
    return _Checked(*args, **kwargs)


class Skip(Exception):
    """Raised by a test that cannot run on this host; the reason is printed."""


def server_params(*extra: str, cwd: str | None = None, env: dict[str, str] | None = None) -> StdioServerParameters:
    """The stdio server command with extra arguments."""
    if not SERVER:
        raise Skip("DSH_MCP_SERVER is not set")
    return StdioServerParameters(command=SERVER[0], args=SERVER[1:] + list(extra), cwd=cwd, env=env)


def roots_callback(*paths: str | Path):
    """A `list_roots_callback` offering `paths` as file:// roots."""

    async def list_roots(_context: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=Path(p).resolve().as_uri()) for p in paths])

    return list_roots


class Notices:
    """Collects logging notifications; `wait_for` awaits one containing a text."""

    def __init__(self) -> None:
        self.messages: list[types.LoggingMessageNotificationParams] = []
        self._changed = asyncio.Event()

    async def __call__(self, params: types.LoggingMessageNotificationParams) -> None:
        self.messages.append(params)
        self._changed.set()

    def texts(self) -> list[str]:
        return [str(m.data) for m in self.messages]

    async def wait_for(self, fragment: str, timeout: float = 30.0) -> types.LoggingMessageNotificationParams:
        deadline = time.monotonic() + timeout
        while True:
            for message in self.messages:
                if fragment in str(message.data):
                    return message
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no notice containing {fragment!r}; got {self.texts()}"
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except asyncio.TimeoutError:
                pass


def text(result: types.CallToolResult) -> str:
    """The first content block's text (the result's own text; notices follow it)."""
    first = result.content[0]
    assert first.type == "text", result
    return first.text


def texts(result: types.CallToolResult) -> list[str]:
    return [block.text for block in result.content if block.type == "text"]


def bash(command: str, **extra: Any) -> dict[str, Any]:
    return {"command": command, "description": "Run a test command", **extra}


async def eventually(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); it is gone for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        # Reaped between the checks: reading a dead process's stat fails with ESRCH.
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tempdir() -> str:
    return tempfile.mkdtemp(prefix="dsh-mcp-e2e-")


def run(tests: list[Callable[[], Awaitable[None]]]) -> int:
    only = set(sys.argv[1:])
    passed = failed = skipped = 0
    for test in tests:
        if only and test.__name__ not in only:
            continue
        started = time.monotonic()
        try:
            asyncio.run(asyncio.wait_for(test(), TEST_TIMEOUT))
        except Skip as reason:
            print(f"SKIP {test.__name__}: {reason}", flush=True)
            skipped += 1
        except BaseException:  # a failing test must never stop the others
            print(f"FAIL {test.__name__}", flush=True)
            traceback.print_exc()
            failed += 1
        else:
            print(f"PASS {test.__name__} ({time.monotonic() - started:.1f}s)", flush=True)
            passed += 1
    print(f"{passed} passed, {failed} failed, {skipped} skipped", flush=True)
    return 1 if failed else 0


__all__ = [
    "Client",
    "Notices",
    "Skip",
    "bash",
    "eventually",
    "free_port",
    "process_alive",
    "roots_callback",
    "run",
    "server_params",
    "tempdir",
    "text",
    "texts",
    "types",
]
