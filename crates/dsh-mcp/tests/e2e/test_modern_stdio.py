"""The stdio server driven by the Python `mcp` client speaking 2026-07-28: the client probes
`server/discover`, adopts the revision and sends no `initialize`; every request carries the
revision, the client and its capabilities in `_meta`. The connection is the session: cwd,
jobs and notices last across its requests, and approvals, network asks and askpass
questions come back as multi-round-trip results (`input_required`) the client answers by
sending the call again. The scenarios of test_stdio.py run again here unchanged, except
where the revision differs (no roots: the cwd is the workspace root; no logging: a
completion notice reaches the next result only)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import harness
from harness import Client, bash, run, server_params, tempdir, text, texts

import test_stdio

harness.MODE = "auto"
harness.REQUIRE_REVISION = "2026-07-28"


async def test_discover_negotiates_2026_07_28_without_initialize() -> None:
    async with Client(server_params()) as client:
        assert client.protocol_version == "2026-07-28", client.protocol_version
        discovered = client.session.discover_result
        assert discovered is not None, "the client adopted a server/discover result"
        assert "2026-07-28" in discovered.supported_versions, discovered
        assert "2025-11-25" in discovered.supported_versions, discovered
        assert client.server_info is not None and client.server_info.name, client.server_info
        assert "Check the [exit code: N] marker on every bash result" in (client.instructions or "")
        ok = await client.call_tool("bash", bash("echo modern"))
        assert text(ok) == "modern\n", text(ok)


async def test_the_log_line_names_the_revision() -> None:
    env = {**os.environ, "RUST_LOG": "dsh_mcp=info"}
    proc = await asyncio.create_subprocess_exec(
        *harness.SERVER,
        "--workspace-root",
        tempdir(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    assert proc.stdin and proc.stdout and proc.stderr
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "bash",
            "arguments": {"command": "echo hi", "description": "t"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "probe", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    proc.stdin.write((json.dumps(call) + "\n").encode())
    await proc.stdin.drain()
    answer = json.loads(await asyncio.wait_for(proc.stdout.readline(), 60))
    assert answer["result"]["content"][0]["text"] == "hi\n", answer
    proc.stdin.close()
    stderr = (await asyncio.wait_for(proc.stderr.read(), 60)).decode()
    await proc.wait()
    assert "MCP session agent" in stderr and "revision=2026-07-28" in stderr, stderr


async def test_cwd_and_jobs_last_across_the_connections_requests() -> None:
    workspace = tempdir()
    async with Client(server_params("--workspace-root", workspace)) as client:
        where = await client.call_tool("bash", bash("pwd; cd /; echo $DSH_SESSION_ID"))
        lines = text(where).splitlines()
        assert lines[0] == os.path.realpath(workspace), lines
        assert lines[1].startswith("mcp-"), lines
        started = await client.call_tool("bash", bash("sleep 0.3; echo bg-ok", run_in_background=True))
        assert text(started) == "started background job bash-1"
        waited = await client.call_tool("job_output", {"job_id": "bash-1", "wait": True})
        assert text(waited) == "bg-ok\n[status: completed, exit code: 0]", text(waited)
        listed = await client.call_tool("job_list", {})
        assert text(listed) == "bash-1 [bash] completed — sleep 0.3; echo bg-ok", text(listed)
        again = await client.call_tool("bash", bash("echo $DSH_SESSION_ID"))
        assert text(again).strip() == lines[1], "one session for the connection"


async def test_completion_notice_reaches_the_next_result() -> None:
    async with Client(server_params()) as client:
        sentinel = Path(tempdir()) / "go"
        command = f"while [ ! -f {sentinel} ]; do sleep 0.05; done; echo done"
        started = await client.call_tool("bash", bash(command, run_in_background=True))
        assert text(started) == "started background job bash-1"
        sentinel.touch()
        expected = f"background job bash-1 (bash: {command}) finished [status: completed, exit code: 0]. Read its output with job_output."
        # No logging notification under 2026-07-28: the notice goes with a later result
        # (any tool's), after that result's own text, once.
        attached: list[str] = []
        deadline = time.monotonic() + 30
        while expected not in attached:
            assert time.monotonic() < deadline, f"no result carried the notice; got {attached}"
            listed = await client.call_tool("job_list", {})
            attached += texts(listed)[1:]
            await asyncio.sleep(0.05)
        after = await client.call_tool("bash", bash("echo later"))
        assert texts(after) == ["later\n"], texts(after)
        assert attached == [expected], attached


async def test_job_kill_stops_a_background_job() -> None:
    async with Client(server_params()) as client:
        started = await client.call_tool("bash", bash("sleep 60", run_in_background=True))
        job_id = started.structured_content["jobId"]
        killed = await client.call_tool("job_kill", {"job_id": job_id})
        assert killed.is_error is False, text(killed)
        waited = await client.call_tool("job_output", {"job_id": job_id, "wait": True})
        assert "[status: killed" in text(waited), text(waited)


if __name__ == "__main__":
    sys.exit(
        run(
            [
                test_discover_negotiates_2026_07_28_without_initialize,
                test_the_log_line_names_the_revision,
                test_cwd_and_jobs_last_across_the_connections_requests,
                test_completion_notice_reaches_the_next_result,
                test_job_kill_stops_a_background_job,
                test_stdio.test_list_tools_and_instructions,
                test_stdio.test_background_job_and_job_output_wait,
                test_stdio.test_cancellation_kills_the_running_command,
                test_stdio.test_progress_notifications_while_a_command_runs,
                test_stdio.test_denied_then_escalated_with_elicitation,
                test_stdio.test_network_ask_through_elicitation,
                test_stdio.test_askpass_through_elicitation,
                test_stdio.test_escalation_hint_only_for_clients_that_can_answer_approvals,
                test_stdio.test_sigterm_tears_the_composition_down,
            ]
        )
    )
