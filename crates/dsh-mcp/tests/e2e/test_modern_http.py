"""The streamable HTTP server driven by the Python `mcp` client speaking 2026-07-28: no
`initialize`, no `Mcp-Session-Id`; the `Mcp-Method` / `Mcp-Name` headers the client sends
agree with its bodies. State lives with the HTTP principal (the bearer token's holder): a
background job started through one connection is read through another, and an approval
comes back as a multi-round-trip result the client answers by sending the call again."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import httpx2

import harness
from harness import Skip, bash, run, tempdir, text, types
from test_http import ACCEPT, HttpServer

harness.MODE = "auto"
harness.REQUIRE_REVISION = "2026-07-28"

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


async def test_http_modern_calls_and_jobs_live_with_the_principal() -> None:
    async with HttpServer() as server:
        async with server.client() as first:
            assert first.protocol_version == "2026-07-28", first.protocol_version
            ok = await first.call_tool("bash", bash("echo over-http"))
            assert text(ok) == "over-http\n", text(ok)
            started = await first.call_tool("bash", bash("sleep 0.3; echo bg-ok", run_in_background=True))
            job_id = started.structured_content["jobId"]
        # A later connection of the same principal reads the job the first one started.
        async with server.client() as second:
            waited = await second.call_tool("job_output", {"job_id": job_id, "wait": True})
            assert text(waited) == "bg-ok\n[status: completed, exit code: 0]", text(waited)
            listed = await second.call_tool("job_list", {})
            assert job_id in text(listed), text(listed)
            killed = await second.call_tool("job_kill", {"job_id": job_id})
            assert killed.is_error is False, text(killed)


async def test_http_modern_requests_get_no_session_id() -> None:
    async with HttpServer() as server, httpx2.AsyncClient(timeout=30) as http:
        headers = {
            "Authorization": f"Bearer {server.token}",
            "Accept": ACCEPT,
            "Content-Type": "application/json",
            "MCP-Protocol-Version": "2026-07-28",
        }
        body = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}}
        found = await http.post(server.url, headers={**headers, "Mcp-Method": "server/discover"}, json=body)
        assert found.status_code == 200, found.text
        assert "mcp-session-id" not in found.headers, found.headers
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "bash", "arguments": bash("echo raw"), "_meta": META},
        }
        called = await http.post(
            server.url, headers={**headers, "Mcp-Method": "tools/call", "Mcp-Name": "bash"}, json=call
        )
        assert called.status_code == 200, called.text
        assert "mcp-session-id" not in called.headers, called.headers
        assert json.loads(called.text)["result"]["content"][0]["text"] == "raw\n", called.text
        wrong = await http.post(
            server.url, headers={**headers, "Mcp-Method": "tools/call", "Mcp-Name": "job_list"}, json=call
        )
        assert wrong.status_code == 400, (wrong.status_code, wrong.text)
        assert json.loads(wrong.text)["error"]["code"] == -32020, wrong.text


async def test_http_modern_escalation_through_rounds() -> None:
    workspace = tempdir()
    target = Path(workspace) / "out.txt"
    questions: list[str] = []
    answers = ["accept", "decline"]

    async def elicit(_context, params) -> types.ElicitResult:
        questions.append(params.message)
        return types.ElicitResult(action=answers[len(questions) - 1])

    extra = ("--sandbox", "read-only", "--workspace-root", workspace)
    async with HttpServer(extra=extra) as server, server.client(elicitation_callback=elicit) as client:
        assert client.protocol_version == "2026-07-28", client.protocol_version
        denied = await client.call_tool("bash", bash(f"printf ok > {target}"))
        if denied.is_error and "no sandbox backend is usable" in text(denied):
            raise Skip(f"the host cannot confine commands: {text(denied)}")
        assert "[sandbox: file access denied under read-only mode]" in text(denied), text(denied)
        escalated = await client.call_tool(
            "bash",
            bash(f"printf ok > {target}", sandbox_permissions="workspace-write", justification="Writes its file."),
        )
        assert escalated.is_error is False, text(escalated)
        assert target.read_text() == "ok"
        assert questions[0].startswith(
            "Allow this bash command to run once with wider sandbox access (workspace-write)?"
        ), questions
        refused = await client.call_tool(
            "bash", bash(f"printf again > {target}", sandbox_permissions="workspace-write", justification="Again.")
        )
        assert text(refused) == 'Error: the user rejected escalating this command to "workspace-write"'
        assert target.read_text() == "ok"


if __name__ == "__main__":
    sys.exit(
        run(
            [
                test_http_modern_calls_and_jobs_live_with_the_principal,
                test_http_modern_requests_get_no_session_id,
                test_http_modern_escalation_through_rounds,
            ]
        )
    )
