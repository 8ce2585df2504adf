"""Measures the median round trip of `tools/call bash {"command":"true", ...}` over stdio,
against the median raw `bash -c true` spawn, and prints both and their ratio.

    DSH_MCP_SERVER=<server command> python bench.py [N]

Two clients are measured: a minimal line-protocol client (the server's own cost) and the
Python `mcp` client (what an agent built on that SDK sees).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time

from harness import SERVER, Client, server_params

N = int(sys.argv[1]) if len(sys.argv) > 1 else 300
WARMUP = 20
CALL = {"name": "bash", "arguments": {"command": "true", "description": "Do nothing"}}


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def raw_spawn() -> list[float]:
    times = []
    for i in range(WARMUP + N):
        started = time.perf_counter()
        subprocess.run(["bash", "-c", "true"], check=True)
        if i >= WARMUP:
            times.append(time.perf_counter() - started)
    return times


def line_client() -> list[float]:
    proc = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin and proc.stdout

    def request(rid: int, method: str, params: dict) -> dict:
        proc.stdin.write((json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}) + "\n").encode())
        proc.stdin.flush()
        while True:
            message = json.loads(proc.stdout.readline())
            if message.get("id") == rid:
                return message

    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}
    request(0, "initialize", init)
    proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    times = []
    for i in range(WARMUP + N):
        started = time.perf_counter()
        reply = request(i + 1, "tools/call", CALL)
        if i >= WARMUP:
            times.append(time.perf_counter() - started)
        assert reply["result"]["isError"] is False, reply
    proc.stdin.close()
    proc.wait(timeout=30)
    return times


async def sdk_client() -> list[float]:
    times = []
    async with Client(server_params()) as client:
        for i in range(WARMUP + N):
            started = time.perf_counter()
            result = await client.call_tool(CALL["name"], CALL["arguments"])
            if i >= WARMUP:
                times.append(time.perf_counter() - started)
            assert result.is_error is False
    return times


def main() -> None:
    raw = statistics.median(raw_spawn())
    line = statistics.median(line_client())
    sdk = statistics.median(asyncio.run(sdk_client()))
    print(f"server: {' '.join(SERVER)}; N={N} after {WARMUP} warm-up calls")
    print(f"raw `bash -c true` spawn        median {ms(raw)}")
    print(f"tools/call bash, line client    median {ms(line)}  ratio {line / raw:.2f}x")
    print(f"tools/call bash, Python mcp SDK median {ms(sdk)}  ratio {sdk / raw:.2f}x")


if __name__ == "__main__":
    main()
