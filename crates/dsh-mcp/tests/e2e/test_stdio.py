"""The stdio server driven by the Python `mcp` client: tools, foreground and background bash,
completion notices, cancellation, progress, session cwd from roots, an escalation
approved through elicitation, a network destination approved and refused through elicitation
under `--network ask`, a secret asked by a command answered on the page of a URL-mode elicitation (`--askpass`),
and the escalation hint offered only to clients that can answer approvals."""

from __future__ import annotations

import asyncio
import hashlib
import http.server
import os
import signal
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from harness import (
    Client,
    Notices,
    Skip,
    bash,
    eventually,
    process_alive,
    roots_callback,
    run,
    server_params,
    tempdir,
    text,
    texts,
    types,
)


async def test_list_tools_and_instructions() -> None:
    async with Client(server_params()) as client:
        listed = await client.list_tools()
        by_name = {tool.name: tool for tool in listed.tools}
        assert set(by_name) == {"bash", "job_output", "job_list", "job_kill"}, by_name.keys()
        bash_tool = by_name["bash"]
        assert list(bash_tool.input_schema["properties"]) == [
            "command",
            "description",
            "timeoutMs",
            "workdir",
            "run_in_background",
        ]
        assert bash_tool.input_schema["required"] == ["command", "description"]
        assert bash_tool.output_schema["type"] == "object"
        assert len(bash_tool.output_schema["oneOf"]) == 2
        assert by_name["job_list"].output_schema["required"] == ["result"]
        assert "Check the [exit code: N] marker on every bash result" in (client.instructions or "")
        # The instructions describe the tools; the client's agent keeps its own identity.
        assert "You are an AI agent" not in (client.instructions or "")


async def test_bash_foreground_in_the_root_cwd() -> None:
    root = tempdir()
    async with Client(server_params(), list_roots_callback=roots_callback(root)) as client:
        ok = await client.call_tool("bash", bash("echo hello; pwd"))
        assert ok.is_error is False
        assert text(ok) == f"hello\n{os.path.realpath(root)}\n", text(ok)
        assert ok.structured_content["kind"] == "foreground"
        assert ok.structured_content["exitCode"] == 0
        failed = await client.call_tool("bash", bash("echo oops >&2; exit 3"))
        assert failed.is_error is False
        assert text(failed) == "[stderr]\noops\n[exit code: 3]", text(failed)
        invalid = await client.call_tool("bash", {"command": "true"})
        assert invalid.is_error is True
        assert text(invalid) == 'Error: invalid arguments: missing required property "description"'
        session = await client.call_tool("bash", bash('printf %s "$DSH_SESSION_ID"'))
        assert text(session).startswith("mcp-"), text(session)


async def test_background_job_and_job_output_wait() -> None:
    async with Client(server_params()) as client:
        started = await client.call_tool("bash", bash("sleep 0.3; echo bg-ok", run_in_background=True))
        assert text(started) == "started background job bash-1"
        assert started.structured_content == {"kind": "background", "jobId": "bash-1"}
        waited = await client.call_tool("job_output", {"job_id": "bash-1", "wait": True})
        assert text(waited) == "bg-ok\n[status: completed, exit code: 0]", text(waited)
        again = await client.call_tool("job_output", {"job_id": "bash-1"})
        assert text(again) == "(no new output)\n[status: completed, exit code: 0]"
        listed = await client.call_tool("job_list", {})
        assert text(listed) == "bash-1 [bash] completed — sleep 0.3; echo bg-ok"
        assert listed.structured_content["result"][0]["id"] == "bash-1"


async def test_completion_notice_is_logged_and_attached_to_the_next_result() -> None:
    notices = Notices()
    async with Client(server_params(), logging_callback=notices) as client:
        root = tempdir()
        sentinel = Path(root) / "go"
        command = f"while [ ! -f {sentinel} ]; do sleep 0.05; done; echo done"
        started = await client.call_tool("bash", bash(command, run_in_background=True))
        assert text(started) == "started background job bash-1"
        sentinel.touch()
        expected = f"background job bash-1 (bash: {command}) finished [status: completed, exit code: 0]. Read its output with job_output."
        logged = await notices.wait_for("background job bash-1")
        assert logged.data == expected, logged
        assert logged.level == "notice"
        following = await client.call_tool("bash", bash("echo next"))
        assert texts(following) == ["next\n", expected], texts(following)
        after = await client.call_tool("bash", bash("echo later"))
        assert texts(after) == ["later\n"]


async def test_cancellation_kills_the_running_command() -> None:
    root = tempdir()
    pidfile = Path(root) / "pid"
    async with Client(server_params()) as client:
        call = asyncio.create_task(client.call_tool("bash", bash(f"echo $$ > {pidfile}; sleep 60; echo finished")))
        await eventually("the command to start", lambda: pidfile.exists() and pidfile.read_text().strip() != "")
        pid = int(pidfile.read_text())
        assert process_alive(pid)
        call.cancel()
        try:
            await call
        except asyncio.CancelledError:
            pass
        await eventually("the cancelled command to die", lambda: not process_alive(pid))
        after = await client.call_tool("bash", bash("echo still here"))
        assert text(after) == "still here\n"


async def test_progress_notifications_while_a_command_runs() -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with Client(server_params()) as client:
        result = await client.call_tool("bash", bash("sleep 2.6; echo slept"), progress_callback=on_progress)
        assert text(result) == "slept\n"
    assert len(seen) >= 2, seen
    values = [p for p, _, _ in seen]
    assert values == sorted(values) and len(set(values)) == len(values), seen
    assert all(m is not None and m.startswith("bash: running for ") for _, _, m in seen), seen


async def test_denied_then_escalated_with_elicitation() -> None:
    workspace = tempdir()
    target = Path(workspace) / "out.txt"
    questions: list[str] = []
    answers = ["accept", "decline"]

    async def elicit(_context, params) -> types.ElicitResult:
        questions.append(params.message)
        return types.ElicitResult(action=answers[len(questions) - 1])

    params = server_params("--sandbox", "read-only", "--workspace-root", workspace)
    async with Client(params, list_roots_callback=roots_callback(workspace), elicitation_callback=elicit) as client:
        denied = await client.call_tool("bash", bash(f"printf ok > {target}"))
        if denied.is_error and "no sandbox backend is usable" in text(denied):
            raise Skip(f"the host cannot confine commands: {text(denied)}")
        assert "[sandbox: file access denied under read-only mode]" in text(denied), text(denied)
        assert not target.exists()
        escalated = await client.call_tool(
            "bash",
            bash(
                f"printf ok > {target}",
                sandbox_permissions="workspace-write",
                justification="The test writes its output file into the workspace.",
            ),
        )
        assert escalated.is_error is False, text(escalated)
        assert escalated.structured_content["exitCode"] == 0, text(escalated)
        assert target.read_text() == "ok"
        assert questions[0] == (
            "Allow this bash command to run once with wider sandbox access (workspace-write)?\n\n"
            f"Command: printf ok > {target}\n"
            f"Working directory: {os.path.realpath(workspace)}\n"
            "Requested mode: workspace-write\n"
            "Justification: The test writes its output file into the workspace.\n\n"
            "Accept to allow it once; decline to refuse."
        ), questions[0]
        refused = await client.call_tool(
            "bash",
            bash(f"printf again > {target}", sandbox_permissions="workspace-write", justification="Again."),
        )
        assert refused.is_error is True
        assert text(refused) == 'Error: the user rejected escalating this command to "workspace-write"'
        assert target.read_text() == "ok"
        # The grant was one-shot: the standing mode still denies.
        again = await client.call_tool("bash", bash(f"printf x > {target}"))
        assert "[sandbox: file access denied under read-only mode]" in text(again)


class _Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        body = b"net-ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args) -> None:
        pass


async def test_network_ask_through_elicitation() -> None:
    workspace = tempdir()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    questions: list[str] = []
    answers = ["accept", "decline"]

    async def elicit(_context, params) -> types.ElicitResult:
        questions.append(params.message)
        return types.ElicitResult(action=answers[len(questions) - 1])

    command = f"curl -sS -m 10 http://127.0.0.1:{port}/; curl -sS -m 10 http://127.0.0.1:{port}/"
    params = server_params("--sandbox", "workspace-write", "--network", "ask", "--workspace-root", workspace)
    try:
        async with Client(params, list_roots_callback=roots_callback(workspace), elicitation_callback=elicit) as client:
            allowed = await client.call_tool("bash", bash(command))
            if allowed.is_error and "no sandbox backend is usable" in text(allowed):
                raise Skip(f"the host cannot confine commands: {text(allowed)}")
            assert text(allowed) == "net-ok\nnet-ok\n", text(allowed)
            assert len(questions) == 1, questions
            assert questions[0] == (
                f"Allow this bash command to connect to 127.0.0.1:{port}?\n\n"
                f"Command: {command}\n"
                f"Working directory: {os.path.realpath(workspace)}\n"
                f"Destination: 127.0.0.1:{port} (not in the network allowlist)\n\n"
                "Accept to allow it for the rest of this command; decline to refuse."
            ), questions[0]
            refused = await client.call_tool("bash", bash(f"curl -sS -m 10 http://127.0.0.1:{port}/"))
            assert len(questions) == 2, "the grant lapsed with its call"
            assert text(refused) == (
                f"dsh-bash network policy: access to 127.0.0.1:{port} denied: the user rejected it\n"
                f"[network: access to 127.0.0.1:{port} denied]"
            ), text(refused)
            assert refused.structured_content["network"] == {"policy": "ask", "denied": [f"127.0.0.1:{port}"]}
    finally:
        server.shutdown()


async def test_askpass_through_elicitation() -> None:
    """A secret is asked by URL (never in a form): the user types it on the one-time page,
    which refuses a second answer; the client sees the URL only."""
    home = tempdir()
    secret = "s3cret-through-elicitation"
    questions: list[types.ElicitRequestParams] = []
    answers = ["accept", "decline"]
    pages: list[tuple[int, str, int]] = []
    tasks: list[asyncio.Task] = []

    def answer_page(url: str) -> None:
        with urllib.request.urlopen(url, timeout=60) as page:
            cache = page.headers["Cache-Control"]
        body = urllib.parse.urlencode({"secret": secret, "action": "give"}).encode()
        with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=60) as posted:
            status = posted.status
        try:
            urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=60)
            again = 200
        except urllib.error.HTTPError as error:
            again = error.code
        pages.append((status, cache, again))

    async def elicit(_context, params) -> types.ElicitResult:
        questions.append(params)
        action = answers[len(questions) - 1]
        if action == "accept":
            tasks.append(asyncio.get_running_loop().create_task(asyncio.to_thread(answer_page, params.url)))
        return types.ElicitResult(action=action)

    command = 'p=$("$SUDO_ASKPASS" "Password: "); printf %s "$p" | sha256sum | cut -c1-16; echo "$p"'
    env = {**os.environ, "DSH_HOME": home}
    async with Client(server_params("--askpass", env=env), elicitation_callback=elicit) as client:
        given = await client.call_tool("bash", bash(command))
        digest = hashlib.sha256(secret.encode()).hexdigest()[:16]
        assert text(given) == f"{digest}\n[redacted:askpass]\n", text(given)
        assert len(questions) == 1, questions
        assert questions[0].mode == "url", questions[0]
        assert questions[0].url.startswith("http://127.0.0.1:"), questions[0].url
        assert questions[0].message == (
            "A bash command asks you for a secret (a password or passphrase).\n\n"
            f"Command: {command}\n"
            "Its prompt (the command's own words, not the harness's): Password: \n\n"
            "Open the page to type it there: it goes to this command only, never to this client or the model. "
            "The page answers once; decline to refuse."
        ), questions[0].message
        await asyncio.gather(*tasks)
        assert pages == [(200, "no-store", 410)], pages
        refused = await client.call_tool("bash", bash('"$GIT_ASKPASS" "Again: "; echo "rc=$?"'))
        assert text(refused) == "rc=1\n", text(refused)
        assert len(questions) == 2, questions
        for result in (given, refused):
            assert secret not in str(result.model_dump()), result
    leaked = [str(path) for path in Path(home).rglob("*") if path.is_file() and secret.encode() in path.read_bytes()]
    assert leaked == [], leaked
    # A composition that keeps session logs records the question (never the answer).
    logs = list(Path(home).rglob("*.jsonl"))
    assert not logs or any('"kind":"secret"' in path.read_text() for path in logs), logs


HINT = (
    "[sandbox: escalation available — retry this exact command once with sandbox_permissions "
    "(the narrowest wider mode that suffices) + justification; the approval prompt asks the user]"
)
DENIAL = "[sandbox: file access denied under read-only mode]"


async def denied_texts(*extra: str, elicitation: bool) -> tuple[str, str]:
    """A denied foreground write and a denied background one (read with job_output) from a
    client that does or does not declare elicitation; returns both texts."""
    workspace = tempdir()

    async def elicit(_context, _params) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    params = server_params("--sandbox", "read-only", "--workspace-root", workspace, *extra)
    callbacks = {"elicitation_callback": elicit} if elicitation else {}
    async with Client(params, list_roots_callback=roots_callback(workspace), **callbacks) as client:
        denied = await client.call_tool("bash", bash(f"printf ok > {Path(workspace) / 'fg.txt'}"))
        if denied.is_error and "no sandbox backend is usable" in text(denied):
            raise Skip(f"the host cannot confine commands: {text(denied)}")
        assert denied.is_error is False, text(denied)
        started = await client.call_tool(
            "bash", bash(f"printf ok > {Path(workspace) / 'bg.txt'}", run_in_background=True)
        )
        job_id = started.structured_content["jobId"]
        output = await client.call_tool("job_output", {"job_id": job_id, "wait": True})
        assert not (Path(workspace) / "fg.txt").exists() and not (Path(workspace) / "bg.txt").exists()
        return text(denied), text(output)


async def test_escalation_hint_only_for_clients_that_can_answer_approvals() -> None:
    # A client without elicitation cannot answer an approval: no hint to retry with one.
    for result in await denied_texts(elicitation=False):
        assert DENIAL in result, result
        assert HINT not in result and "sandbox_permissions" not in result, result
    # Nor can any client when the server does not elicit.
    for result in await denied_texts("--no-elicitation", elicitation=True):
        assert DENIAL in result, result
        assert HINT not in result, result
    # A client that declared elicitation is offered the escalation.
    foreground, job_output = await denied_texts(elicitation=True)
    assert foreground.endswith(f"{DENIAL}\n{HINT}\n[exit code: 1]"), foreground
    assert job_output.endswith(f"{DENIAL}\n{HINT}\n[status: completed, exit code: 1]"), job_output


async def test_sigterm_tears_the_composition_down() -> None:
    pidfile = Path(tempdir()) / "pid"
    pids: dict[str, int] = {}
    try:
        async with Client(server_params()) as client:
            # The server spawns `bash -c` itself, so the command's parent is the server.
            pids["server"] = int(text(await client.call_tool("bash", bash("echo $PPID"))))
            await client.call_tool("bash", bash(f"echo $$ > {pidfile}; exec sleep 60", run_in_background=True))
            await eventually("the job to start", lambda: pidfile.exists() and pidfile.read_text().strip() != "")
            pids["job"] = int(pidfile.read_text())
            os.kill(pids["server"], signal.SIGTERM)
            await eventually("the server to exit", lambda: not process_alive(pids["server"]), timeout=10)
            pids["exited"] = pids["server"]
    except Exception:  # the client may complain that its server went away
        if "job" not in pids:
            raise
    # Checked while the client still held the server's stdin open: SIGTERM alone ends it.
    assert "exited" in pids, "the server exited on SIGTERM while its client was connected"
    assert not process_alive(pids["server"]), "the server exited on SIGTERM"
    assert not process_alive(pids["job"]), "the server killed its jobs before exiting"


if __name__ == "__main__":
    sys.exit(
        run(
            [
                test_list_tools_and_instructions,
                test_bash_foreground_in_the_root_cwd,
                test_background_job_and_job_output_wait,
                test_completion_notice_is_logged_and_attached_to_the_next_result,
                test_cancellation_kills_the_running_command,
                test_progress_notifications_while_a_command_runs,
                test_denied_then_escalated_with_elicitation,
                test_network_ask_through_elicitation,
                test_askpass_through_elicitation,
                test_escalation_hint_only_for_clients_that_can_answer_approvals,
                test_sigterm_tears_the_composition_down,
            ]
        )
    )
