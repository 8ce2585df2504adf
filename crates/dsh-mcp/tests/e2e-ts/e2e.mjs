// The MCP server driven by the TypeScript SDK clients, over stdio and streamable HTTP:
// `@modelcontextprotocol/sdk` 1.32 (the `initialize` handshake, 2025-11-25) and
// `@modelcontextprotocol/client` 2.4 (probes `server/discover`, then 2026-07-28 without
// `initialize`). Each covers every tool (bash foreground and background, job_output,
// job_list, job_kill) and an escalation approved through elicitation (a server request
// under 2025-11-25, a multi-round-trip result under 2026-07-28).
//
//   DSH_MCP_SERVER="<server command>" node e2e.mjs
//
// Prints `PASS/FAIL <name>` lines; exits 1 when any test failed.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, realpathSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { Client as LegacyClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport as LegacyStdio } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport as LegacyHttp } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { Client as ModernClient, StreamableHTTPClientTransport as ModernHttp } from '@modelcontextprotocol/client';
import { StdioClientTransport as ModernStdio } from '@modelcontextprotocol/client/stdio';

const SERVER = (process.env.DSH_MCP_SERVER ?? '').split(/\s+/).filter(Boolean);
if (SERVER.length === 0) {
    console.error('DSH_MCP_SERVER is not set');
    process.exit(1);
}

const tempdir = () => mkdtempSync(join(tmpdir(), 'dsh-mcp-ts-'));
const bash = (command, extra = {}) => ({ command, description: 'Run a test command', ...extra });
const text = result => result.content[0].text;

/** A client of `sdk` ('legacy' or 'modern') answering elicitations with `answers` in turn. */
function makeClient(sdk, answers, questions) {
    const info = { name: `dsh-e2e-${sdk}`, version: '0' };
    const capabilities = { elicitation: { form: {} } };
    const answer = async request => {
        questions.push(request.params.message);
        return { action: answers[questions.length - 1] ?? 'decline' };
    };
    if (sdk === 'legacy') {
        const client = new LegacyClient(info, { capabilities });
        client.setRequestHandler(ElicitRequestSchema, answer);
        return client;
    }
    const client = new ModernClient(info, { capabilities, versionNegotiation: { mode: 'auto' } });
    client.setRequestHandler('elicitation/create', answer);
    return client;
}

function freePort() {
    return new Promise((resolve, reject) => {
        const server = createServer();
        server.on('error', reject);
        server.listen(0, '127.0.0.1', () => {
            const { port } = server.address();
            server.close(() => resolve(port));
        });
    });
}

async function waitForPort(port, child) {
    const deadline = Date.now() + 30000;
    for (;;) {
        const open = await new Promise(resolve => {
            const socket = createConnection({ port, host: '127.0.0.1' }, () => {
                socket.end();
                resolve(true);
            });
            socket.on('error', () => resolve(false));
        });
        if (open) return;
        assert.equal(child.exitCode, null, 'the HTTP server exited at start');
        assert.ok(Date.now() < deadline, 'the HTTP server did not start listening');
        await new Promise(r => setTimeout(r, 50));
    }
}

/** Connects `sdk`'s client over `transport` ('stdio' or 'http') to a server started with `args`. */
async function connect(sdk, transport, args, answers = [], questions = []) {
    const client = makeClient(sdk, answers, questions);
    if (transport === 'stdio') {
        const Stdio = sdk === 'legacy' ? LegacyStdio : ModernStdio;
        await client.connect(new Stdio({ command: SERVER[0], args: [...SERVER.slice(1), ...args], stderr: 'inherit' }));
        return { client, close: () => client.close() };
    }
    const port = await freePort();
    const token = randomBytes(16).toString('hex');
    const child = spawn(SERVER[0], [...SERVER.slice(1), '--http', `127.0.0.1:${port}`, ...args], {
        env: { ...process.env, DSH_MCP_TOKEN: token },
        stdio: ['ignore', 'inherit', 'inherit']
    });
    await waitForPort(port, child);
    const Http = sdk === 'legacy' ? LegacyHttp : ModernHttp;
    const url = new URL(`http://127.0.0.1:${port}/mcp`);
    await client.connect(new Http(url, { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
    return {
        client,
        close: async () => {
            await client.close();
            child.kill('SIGTERM');
            await new Promise(resolve => (child.exitCode !== null ? resolve() : child.on('exit', resolve)));
        }
    };
}

const EXPECTED = { legacy: '2025-11-25', modern: '2026-07-28' };

/** The revision a connected client speaks. */
function revision(sdk, client) {
    if (sdk === 'modern') {
        assert.equal(client.getProtocolEra(), 'modern');
        return client.getNegotiatedProtocolVersion();
    }
    // The 1.32 client asks for 2025-11-25 at `initialize` and refuses any answer it does not
    // support; it keeps the answer to itself, so its connecting at all is the check.
    assert.ok(client.getServerVersion(), 'the server answered initialize');
    return EXPECTED.legacy;
}

async function everyTool(sdk, transport) {
    const workspace = tempdir();
    const { client, close } = await connect(sdk, transport, ['--workspace-root', workspace]);
    try {
        assert.equal(revision(sdk, client), EXPECTED[sdk]);
        const listed = await client.listTools();
        assert.deepEqual(listed.tools.map(t => t.name).sort(), ['bash', 'job_kill', 'job_list', 'job_output']);
        const ok = await client.callTool({ name: 'bash', arguments: bash('echo hello; pwd') });
        assert.equal(ok.isError, false);
        assert.equal(text(ok), `hello\n${realpathSync(workspace)}\n`);
        const started = await client.callTool({
            name: 'bash',
            arguments: bash('sleep 0.3; echo bg-ok', { run_in_background: true })
        });
        assert.equal(text(started), 'started background job bash-1');
        const waited = await client.callTool({ name: 'job_output', arguments: { job_id: 'bash-1', wait: true } });
        assert.equal(text(waited), 'bg-ok\n[status: completed, exit code: 0]');
        const jobs = await client.callTool({ name: 'job_list', arguments: {} });
        assert.equal(text(jobs), 'bash-1 [bash] completed — sleep 0.3; echo bg-ok');
        const long = await client.callTool({ name: 'bash', arguments: bash('sleep 60', { run_in_background: true }) });
        const id = long.structuredContent.jobId;
        const killed = await client.callTool({ name: 'job_kill', arguments: { job_id: id } });
        assert.equal(killed.isError, false, text(killed));
        const gone = await client.callTool({ name: 'job_output', arguments: { job_id: id, wait: true } });
        assert.match(text(gone), /\[status: killed/);
    } finally {
        await close();
    }
}

async function approval(sdk, transport) {
    const workspace = tempdir();
    const target = join(workspace, 'out.txt');
    const questions = [];
    const args = ['--sandbox', 'read-only', '--workspace-root', workspace];
    const { client, close } = await connect(sdk, transport, args, ['accept', 'decline'], questions);
    try {
        assert.equal(revision(sdk, client), EXPECTED[sdk]);
        const denied = await client.callTool({ name: 'bash', arguments: bash(`printf ok > ${target}`) });
        assert.match(text(denied), /\[sandbox: file access denied under read-only mode\]/);
        const escalated = await client.callTool({
            name: 'bash',
            arguments: bash(`printf ok > ${target}`, {
                sandbox_permissions: 'workspace-write',
                justification: 'The test writes its output file.'
            })
        });
        assert.equal(escalated.isError, false, text(escalated));
        assert.equal(readFileSync(target, 'utf8'), 'ok');
        assert.equal(questions.length, 1);
        assert.ok(
            questions[0].startsWith('Allow this bash command to run once with wider sandbox access (workspace-write)?'),
            questions[0]
        );
        const refused = await client.callTool({
            name: 'bash',
            arguments: bash(`printf again > ${target}`, { sandbox_permissions: 'workspace-write', justification: 'Again.' })
        });
        assert.equal(text(refused), 'Error: the user rejected escalating this command to "workspace-write"');
        assert.equal(readFileSync(target, 'utf8'), 'ok');
    } finally {
        await close();
    }
}

const tests = [];
for (const sdk of ['legacy', 'modern']) {
    for (const transport of ['stdio', 'http']) {
        tests.push([`${sdk}_${transport}_every_tool`, () => everyTool(sdk, transport)]);
        tests.push([`${sdk}_${transport}_approval`, () => approval(sdk, transport)]);
    }
}

let failed = 0;
const only = new Set(process.argv.slice(2));
for (const [name, test] of tests) {
    if (only.size && !only.has(name)) continue;
    const started = Date.now();
    try {
        await Promise.race([
            test(),
            new Promise((_, reject) => setTimeout(() => reject(new Error('timed out after 120 s')), 120000).unref())
        ]);
        console.log(`PASS ${name} (${((Date.now() - started) / 1000).toFixed(1)}s)`);
    } catch (error) {
        failed += 1;
        console.log(`FAIL ${name}`);
        console.log(error);
    }
}
console.log(`${tests.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
