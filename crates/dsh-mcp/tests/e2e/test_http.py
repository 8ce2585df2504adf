"""The streamable HTTP server driven by the Python `mcp` client and raw HTTP: one composition
session per MCP session (own cwd, own jobs), the bearer token, a flood of malformed requests,
and teardown when a session closes or the server is signalled."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import socket
import sys
import time
import traceback
from pathlib import Path

import httpx2
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from harness import (
    SERVER,
    Client,
    Skip,
    bash,
    eventually,
    free_port,
    process_alive,
    roots_callback,
    run,
    tempdir,
    text,
)

ACCEPT = "application/json, text/event-stream"


class HttpServer:
    """The server under test, serving HTTP on a free loopback port."""

    def __init__(self, capture_stderr: bool = False, extra: tuple[str, ...] = ()) -> None:
        if not SERVER:
            raise Skip("DSH_MCP_SERVER is not set")
        self.capture_stderr = capture_stderr
        self.extra = extra
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> "HttpServer":
        env = {**os.environ, "DSH_MCP_TOKEN": self.token}
        if self.capture_stderr:
            # The server's own default log filter, as a user starts it.
            env.pop("RUST_LOG", None)
        self.process = await asyncio.create_subprocess_exec(
            *SERVER,
            "--http",
            f"127.0.0.1:{self.port}",
            *self.extra,
            env=env,
            stderr=asyncio.subprocess.PIPE if self.capture_stderr else None,
        )
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return self
            assert self.process.returncode is None, "the HTTP server exited at start"
            assert time.monotonic() < deadline, "the HTTP server did not start listening"
            await asyncio.sleep(0.05)

    async def __aexit__(self, *exc) -> None:
        if self.process and self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 30)
            except asyncio.TimeoutError:
                self.process.kill()
                await self.process.wait()

    def client(self, *roots: str, token: str | None = None, **options) -> Client:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token or self.token}"})
        transport = streamable_http_client(self.url, http_client=http)
        return Client(transport, list_roots_callback=roots_callback(*roots) if roots else None, **options)


async def test_http_sessions_have_their_own_cwd_and_jobs() -> None:
    dir_a, dir_b = tempdir(), tempdir()
    async with HttpServer() as server, server.client(dir_a) as a, server.client(dir_b) as b:
        where_a = await a.call_tool("bash", bash("pwd"))
        where_b = await b.call_tool("bash", bash("pwd"))
        assert text(where_a) == f"{Path(dir_a).resolve()}\n", text(where_a)
        assert text(where_b) == f"{Path(dir_b).resolve()}\n", text(where_b)

        started = await a.call_tool("bash", bash("sleep 30", run_in_background=True))
        assert text(started) == "started background job bash-1"

        read = await b.call_tool("job_output", {"job_id": "bash-1"})
        assert read.is_error is True
        assert text(read) == "Error: job bash-1 belongs to another session", text(read)
        kill = await b.call_tool("job_kill", {"job_id": "bash-1"})
        assert kill.is_error is True
        assert text(kill) == "Error: job bash-1 belongs to another session", text(kill)
        assert text(await b.call_tool("job_list", {})) == "(no background jobs)"

        assert text(await a.call_tool("job_list", {})) == "bash-1 [bash] running — sleep 30"
        assert text(await a.call_tool("job_kill", {"job_id": "bash-1"})) == "requested cancellation of job bash-1"
        waited = await a.call_tool("job_output", {"job_id": "bash-1", "wait": True})
        assert text(waited).endswith("[status: killed, signal: SIGTERM]"), text(waited)


async def test_http_requires_the_bearer_token() -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
    async with HttpServer() as server, httpx2.AsyncClient(timeout=30) as http:
        headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
        missing = await http.post(server.url, json=initialize, headers=headers)
        assert missing.status_code == 401, missing.status_code
        assert missing.headers["www-authenticate"] == "Bearer"
        wrong = await http.post(server.url, json=initialize, headers={**headers, "Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        stream = await http.get(server.url, headers={"Accept": "text/event-stream"})
        assert stream.status_code == 401
        elsewhere = await http.post(f"http://127.0.0.1:{server.port}/other", json=initialize, headers=headers)
        assert elsewhere.status_code == 401
        good = await http.post(server.url, json=initialize, headers={**headers, "Authorization": f"Bearer {server.token}"})
        assert good.status_code == 200, good.status_code
        async with server.client() as client:
            assert text(await client.call_tool("bash", bash("echo authorized"))) == "authorized\n"
        try:
            async with server.client(token="wrong"):
                pass
        except Exception as error:  # the client raises an exception group around MCPError
            assert "Unauthorized" in "".join(traceback.format_exception(error)), error
        else:
            raise AssertionError("a session with a wrong token must not start")


async def test_http_malformed_requests_leave_the_server_serving() -> None:
    async with HttpServer() as server, httpx2.AsyncClient(timeout=30) as http:
        auth = {"Authorization": f"Bearer {server.token}"}
        json_headers = {**auth, "Accept": ACCEPT, "Content-Type": "application/json"}
        kinds = [
            ("POST", b"{not json", json_headers),
            ("POST", b"[1, 2, 3]", json_headers),
            ("POST", b'"just a string"', json_headers),
            ("POST", json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode(), json_headers),
            ("POST", json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": 5}}).encode(), {**json_headers, "Mcp-Session-Id": "no-such-session"}),
            ("POST", json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 7}}).encode(), json_headers),
            ("POST", b"plain text", {**auth, "Accept": ACCEPT, "Content-Type": "text/plain"}),
            ("POST", b"{}", {**auth, "Content-Type": "application/json"}),
            ("GET", b"", {**auth, "Accept": "text/event-stream", "Mcp-Session-Id": "no-such-session"}),
            ("PUT", b"{}", json_headers),
        ]
        statuses: dict[int, int] = {}
        started = time.monotonic()
        for i in range(1000):
            method, body, headers = kinds[i % len(kinds)]
            response = await http.request(method, server.url, content=body, headers=headers)
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            assert 400 <= response.status_code < 500, (method, body[:60], response.status_code, response.text[:200])
            assert time.monotonic() - started < 90, "the flood took too long"
        # An oversized body is refused too (a few, not a thousand: each is 5 MiB).
        for _ in range(3):
            huge = await http.post(server.url, content=b"x" * (5 * 1024 * 1024), headers=json_headers)
            assert huge.status_code == 413, huge.status_code
        async with server.client() as client:
            listed = await client.list_tools()
            assert {tool.name for tool in listed.tools} == {"bash", "job_output", "job_list", "job_kill"}
            assert text(await client.call_tool("bash", bash("echo still serving"))) == "still serving\n"


async def test_http_closing_a_session_ends_its_jobs_only() -> None:
    root = tempdir()
    pid_a, pid_b = Path(root) / "a", Path(root) / "b"
    async with HttpServer() as server, server.client() as b:
        async with server.client() as a:
            await a.call_tool("bash", bash(f"echo $$ > {pid_a}; exec sleep 60", run_in_background=True))
            await b.call_tool("bash", bash(f"echo $$ > {pid_b}; exec sleep 60", run_in_background=True))
            await eventually("both jobs to start", lambda: pid_a.exists() and pid_b.exists() and pid_a.read_text() and pid_b.read_text())
        # Leaving the context sent DELETE: session a is over, its job killed.
        a_pid, b_pid = int(pid_a.read_text()), int(pid_b.read_text())
        await eventually("the closed session's job to die", lambda: not process_alive(a_pid))
        assert process_alive(b_pid), "the other session's job is untouched"
        listed = await b.call_tool("job_list", {})
        assert "running" in text(listed), text(listed)


async def test_http_sigterm_tears_the_composition_down() -> None:
    root = tempdir()
    pidfile = Path(root) / "pid"
    server = HttpServer()
    async with server:
        async with server.client() as client:
            await client.call_tool("bash", bash(f"echo $$ > {pidfile}; exec sleep 60", run_in_background=True))
            await eventually("the job to start", lambda: pidfile.exists() and pidfile.read_text())
            job = int(pidfile.read_text())
            assert server.process is not None
            server.process.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(server.process.wait(), 30)
            assert code == 0, code
            assert not process_alive(job), "the job died with the server"


async def test_http_client_sessions_leave_no_warning_in_the_log() -> None:
    """Sessions of this client, with the prompt and resource lists it asks for whatever the
    server's capabilities say, leave no warning or error in the server's log: the lists are
    answered empty, and a connection that comes and goes is not worth a line."""
    server = HttpServer(capture_stderr=True)
    async with server:
        for _ in range(2):
            async with server.client() as client:
                await client.list_tools()
                assert (await client.list_prompts()).prompts == []
                assert (await client.list_resources()).resources == []
                assert (await client.list_resource_templates()).resource_templates == []
                assert text(await client.call_tool("bash", bash("echo hi"))) == "hi\n"
    assert server.process is not None and server.process.stderr is not None
    log = (await server.process.stderr.read()).decode(errors="replace")
    assert "WARN" not in log and "ERROR" not in log, log


if __name__ == "__main__":
    sys.exit(
        run(
            [
                test_http_sessions_have_their_own_cwd_and_jobs,
                test_http_requires_the_bearer_token,
                test_http_malformed_requests_leave_the_server_serving,
                test_http_closing_a_session_ends_its_jobs_only,
                test_http_sigterm_tears_the_composition_down,
                test_http_client_sessions_leave_no_warning_in_the_log,
            ]
        )
    )
