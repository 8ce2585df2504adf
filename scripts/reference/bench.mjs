#!/usr/bin/env node
// The reference side of `scripts/bench-compare`: the published TypeScript bash executor
// (@deepseek-ai/dsh-bash-local over @deepseek-ai/dsh-subprocess-local, composed on a bare
// @deepseek-ai/cordis Context, i.e. `ctx.shell`), measured exactly like the Rust peer
// `crates/dsh-bench/src/bin/bench_peer/peer.rs` measures `LocalBashExecutor`:
//
//   node bench.mjs latency N [--warmup W]      N sequential run(`true`): p50/p99, calls/s
//   node bench.mjs throughput BYTES [--plain]  one `head -c BYTES /dev/zero | tr '\0' a`
//                                              (without `| tr` with --plain): MB/s, peak RSS
//   node bench.mjs concurrent N                N `sleep 0.5; echo done` at once: wall - 500 ms
//   node bench.mjs background N                N start() of a 100-line loop, drained and read
//   node bench.mjs timeout [--timeout-ms MS] [--command CMD]   overshoot past the timeout
//       common: --config JSON   (executor config: timeoutMs, maxOutputBytes, graceMs, ...)
//
// Each call is a fresh process that composes, runs one benchmark, disposes, and prints ONE
// JSON line with the Rust peer's layout and keys: {impl: "ts", bench, params, results, shape,
// compose_ms, executor_config, env, ts, dispose_ms}. The reference creates a private spill
// directory under os.tmpdir() and never removes it, so TMPDIR points at a directory of our
// own while we measure, removed on exit (the Rust peer gives its service a private spill
// directory the same way).

import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs'
import os from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'

const MIB = 1024 * 1024

// Arguments as the Rust peer parses them: `--flag value`, or a boolean `--flag` when nothing
// or another flag follows.
function parseArgs(argv) {
  const positional = []
  const flags = new Map()
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]
    if (!arg.startsWith('--')) {
      positional.push(arg)
    } else if (i + 1 < argv.length && !argv[i + 1].startsWith('--')) {
      flags.set(arg.slice(2), argv[++i])
    } else {
      flags.set(arg.slice(2), null)
    }
  }
  const int = (value, name, fallback) => {
    if (value === undefined || value === null) {
      if (fallback === undefined) throw new Error(`missing ${name}`)
      return fallback
    }
    if (!/^\d+$/.test(value)) throw new Error(`${name} must be a non-negative integer, got ${value}`)
    return Number(value)
  }
  return {
    positional,
    flag: (name) => flags.get(name) ?? undefined,
    has: (name) => flags.has(name),
    intAt: (index, name) => int(positional[index], name),
    intFlag: (name, fallback) => int(flags.get(name), `--${name}`, fallback),
  }
}

// Numbers rounded like the Rust peer's `round`: non-finite values become null.
function round(x, digits = 3) {
  if (typeof x !== 'number' || !Number.isFinite(x)) return null
  const f = 10 ** digits
  return Math.round(x * f) / f
}

// Nearest-rank percentile over an ascending array.
function pct(sorted, p) {
  if (sorted.length === 0) return NaN
  const rank = Math.ceil((p / 100) * sorted.length)
  return sorted[Math.min(Math.max(rank, 1), sorted.length) - 1]
}

function stats(samplesMs) {
  const s = [...samplesMs].sort((a, b) => a - b)
  const mean = s.reduce((a, b) => a + b, 0) / Math.max(s.length, 1)
  return {
    n: s.length,
    min_ms: round(s[0]),
    p50_ms: round(pct(s, 50)),
    p90_ms: round(pct(s, 90)),
    p99_ms: round(pct(s, 99)),
    max_ms: round(s[s.length - 1]),
    mean_ms: round(mean),
  }
}

// Keys (sorted) mapped to the shapes of their values; leaves are `typeof` names.
function shapeOf(v) {
  if (v === null || v === undefined) return 'null'
  if (v instanceof Promise) return 'future'
  if (Array.isArray(v)) return v.length ? [shapeOf(v[0])] : []
  if (typeof v !== 'object') return typeof v
  return Object.fromEntries(Object.keys(v).sort().map((k) => [k, shapeOf(v[k])]))
}

// Samples this process's resident set every `intervalMs` on the event loop.
function sampleRss(intervalMs) {
  let peak = process.memoryUsage.rss()
  let samples = 1
  const timer = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage.rss())
    samples++
  }, intervalMs)
  return () => {
    clearInterval(timer)
    return { peak: Math.max(peak, process.memoryUsage.rss()), samples: samples + 1 }
  }
}

const run = (shell, request) => shell.run(shell.resolve(request))

// ----------------------------------------------------------------------------- benchmarks

async function latency(shell, args) {
  const n = args.intAt(1, 'N')
  const warmup = args.intFlag('warmup', 5)
  let first = null
  let shape = null
  for (let i = 0; i < warmup; i++) {
    const t0 = performance.now()
    const r = await run(shell, { command: 'true' })
    if (i === 0) {
      first = performance.now() - t0
      shape = shapeOf(r)
    }
    if (r.exitCode !== 0) throw new Error(`warmup exit ${r.exitCode}`)
  }
  const samples = []
  let failures = 0
  const wall0 = performance.now()
  for (let i = 0; i < n; i++) {
    const t0 = performance.now()
    const r = await run(shell, { command: 'true' })
    samples.push(performance.now() - t0)
    if (r.exitCode !== 0) failures++
    shape ??= shapeOf(r)
  }
  const wall = performance.now() - wall0
  return {
    params: { n, warmup, command: 'true' },
    results: {
      ...stats(samples),
      total_wall_ms: round(wall),
      calls_per_s: round(n / (wall / 1000), 1),
      cold_first_ms: round(first),
      failures,
    },
    shape,
  }
}

// The Rust peer's `throughput_command`: the report matches rows on this exact string.
function throughputCommand(bytes, plain) {
  return plain ? `head -c ${bytes} /dev/zero` : `head -c ${bytes} /dev/zero | tr '\\0' a`
}

async function throughput(shell, args) {
  const bytes = args.intAt(1, 'BYTES')
  const plain = args.has('plain')
  const command = throughputCommand(bytes, plain)
  const rssBefore = process.memoryUsage.rss()
  const stopSampler = sampleRss(5)
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  const r = await run(shell, { command })
  const wallS = (performance.now() - t0) / 1000
  const cpu = process.cpuUsage(cpu0)
  const { peak, samples } = stopSampler()
  let spillBytes = null
  if (r.stdout.spillPath) {
    try {
      spillBytes = statSync(r.stdout.spillPath).size
    } catch {}
  }
  const tail = r.stdout.text
  const fill = plain ? '\0' : 'a'
  let tailAllFill = true
  for (let i = 0; i < tail.length && tailAllFill; i++) tailAllFill = tail[i] === fill
  return {
    params: {
      bytes,
      command,
      stdoutMaxBytes: shell.config.maxOutputBytes,
      maxSpillBytes: shell.config.maxSpillBytes,
    },
    results: {
      wall_s: round(wallS, 4),
      mb_per_s: round(bytes / 1e6 / wallS, 1),
      mib_per_s: round(bytes / MIB / wallS, 1),
      exit_code: r.exitCode,
      truncated: r.stdout.truncated,
      retained_tail_chars: [...tail].length,
      tail_all_a: tailAllFill,
      spill_path: r.stdout.spillPath ?? null,
      spill_file_bytes: spillBytes,
      spill_complete: spillBytes === null ? null : spillBytes === bytes,
      rss_before_mib: round(rssBefore / MIB, 1),
      rss_peak_sampled_mib: round(peak / MIB, 1),
      rss_samples: samples,
      // ru_maxrss (KiB): the lifetime peak, as the Rust peer's VmHWM.
      max_rss_mib: round(process.resourceUsage().maxRSS / 1024, 1),
      cpu_user_s: round(cpu.user / 1e6, 3),
      cpu_sys_s: round(cpu.system / 1e6, 3),
    },
    shape: shapeOf(r),
  }
}

async function concurrent(shell, args) {
  const n = args.intAt(1, 'N')
  const command = 'sleep 0.5; echo done'
  const per = new Array(n).fill(0)
  const t0 = performance.now()
  const results = await Promise.all(
    Array.from({ length: n }, async (_, i) => {
      const s = performance.now()
      const r = await run(shell, { command })
      per[i] = performance.now() - s
      return r
    }),
  )
  const wall = performance.now() - t0
  const ok = results.filter((r) => r.exitCode === 0 && r.stdout.text === 'done\n').length
  return {
    params: { n, command },
    results: {
      wall_ms: round(wall),
      overhead_ms: round(wall - 500),
      all_ok: ok === n,
      ok,
      per_call: stats(per),
    },
    shape: results.length ? shapeOf(results[0]) : null,
  }
}

async function background(shell, args) {
  const n = args.intAt(1, 'N')
  const command = 'for i in $(seq 1 100); do echo line $i; done'
  const expected = Array.from({ length: 100 }, (_, i) => `line ${i + 1}\n`).join('')
  const t0 = performance.now()
  const procs = []
  for (let i = 0; i < n; i++) procs.push(shell.start(shell.resolve({ command })))
  const tStarted = performance.now()
  const shapeStart = procs.length ? shapeOf(procs[0]) : null
  for (const p of procs) await p.done
  const tDone = performance.now()
  const shapeDone = procs.length ? shapeOf(procs[0]) : null
  const reads = procs.map((p) => p.readOutput())
  const tRead = performance.now()
  const counts = reads.map((r) => r.delta.split('\n').filter((l) => l !== '').length)
  const exact = reads.filter((r) => r.delta === expected).length
  const statuses = {}
  for (const p of procs) statuses[p.status] = (statuses[p.status] ?? 0) + 1
  const secondReadEmpty = procs.every((p) => p.readOutput().delta === '')
  return {
    params: { n, command },
    results: {
      wall_ms: round(tRead - t0),
      start_all_ms: round(tStarted - t0),
      all_done_ms: round(tDone - t0),
      read_all_ms: round(tRead - tDone),
      all_have_100_lines: counts.every((c) => c === 100),
      all_exact: exact === n,
      min_lines: counts.length ? Math.min(...counts) : null,
      max_lines: counts.length ? Math.max(...counts) : null,
      any_lossy: reads.some((r) => r.lossy),
      statuses: Object.fromEntries(Object.entries(statuses).sort()),
      exit_codes_zero: procs.every((p) => p.exitCode === 0),
      second_read_empty: secondReadEmpty,
    },
    shape: {
      process_at_start: shapeStart,
      process_after_done: shapeDone,
      read: reads.length ? shapeOf(reads[0]) : null,
    },
  }
}

async function timeout(shell, args) {
  const timeoutMs = args.intFlag('timeout-ms', 500)
  const command = args.flag('command') ?? 'sleep 30'
  const t0 = performance.now()
  const r = await run(shell, { command, timeoutMs })
  const wall = performance.now() - t0
  return {
    params: { command, timeoutMs, graceMs: shell.config.graceMs },
    results: {
      wall_ms: round(wall),
      overshoot_ms: round(wall - timeoutMs),
      timedOut: r.timedOut,
      aborted: r.aborted,
      signal: r.signal,
      exitCode: r.exitCode,
      timeoutMs: r.timeoutMs,
      stdout_text: r.stdout.text,
      stderr_text: r.stderr.text,
    },
    shape: shapeOf(r),
  }
}

const BENCHES = { latency, throughput, concurrent, background, timeout }

// ---------------------------------------------------------------------------- composition

// A bare Context, the local subprocess runtime (provides ctx.subprocess), then the local
// bash executor (injects it, provides ctx.shell). No settings service is mounted, so the
// config given here is the one that applies.
async function compose(config) {
  const { Context } = await import('@deepseek-ai/cordis')
  const { default: LocalSubprocessRuntime } = await import('@deepseek-ai/dsh-subprocess-local')
  const { default: LocalBashExecutor } = await import('@deepseek-ai/dsh-bash-local')
  const ctx = new Context()
  const subprocess = ctx.plugin(LocalSubprocessRuntime)
  await subprocess
  const bash = ctx.plugin(LocalBashExecutor, config)
  await bash
  if (!ctx.shell) throw new Error('ctx.shell is not provided after applying dsh-bash-local')
  return {
    shell: ctx.shell,
    async dispose() {
      await bash.dispose()
      await subprocess.dispose()
    },
  }
}

function version(name) {
  try {
    const url = new URL(`./node_modules/${name}/package.json`, import.meta.url)
    return JSON.parse(readFileSync(url, 'utf8')).version
  } catch {
    return null
  }
}

function envInfo() {
  const names = [
    'dsh-bash-local',
    'dsh-subprocess-local',
    'dsh-shell',
    'dsh-subprocess',
    'dsh-timeout',
    'dsh-settings',
    'cordis',
  ]
  return {
    node: process.version,
    platform: `${process.platform}-${process.arch}`,
    kernel: os.release(),
    nproc: os.availableParallelism?.() ?? os.cpus().length,
    cpu: os.cpus()[0]?.model ?? null,
    packages: Object.fromEntries(names.map((n) => [`@deepseek-ai/${n}`, version(`@deepseek-ai/${n}`)])),
  }
}

async function main() {
  const args = parseArgs(process.argv.slice(2))
  const name = args.positional[0]
  const bench = Object.hasOwn(BENCHES, name ?? '') ? BENCHES[name] : undefined
  if (!bench) {
    process.stderr.write(
      `usage: node bench.mjs <${Object.keys(BENCHES).join('|')}> ARG [--config JSON] [--warmup W] [--plain] [--timeout-ms MS] [--command CMD]\n`,
    )
    return 2
  }
  const config = args.flag('config') ? JSON.parse(args.flag('config')) : {}
  const spillDir = mkdtempSync(join(os.tmpdir(), 'dsh-bench-ref-'))
  process.env.TMPDIR = spillDir
  try {
    const t0 = performance.now()
    const composed = await compose(config)
    const composeMs = performance.now() - t0
    let outcome
    let failure
    try {
      outcome = await bench(composed.shell, args)
    } catch (e) {
      failure = e
    }
    const executorConfig = { ...composed.shell.config }
    const t1 = performance.now()
    await composed.dispose()
    const disposeMs = performance.now() - t1
    if (failure) throw failure
    const line = {
      impl: 'ts',
      bench: name,
      params: outcome.params,
      results: outcome.results,
      shape: outcome.shape,
      compose_ms: round(composeMs),
      executor_config: executorConfig,
      env: envInfo(),
      ts: new Date().toISOString(),
      dispose_ms: round(disposeMs),
    }
    process.stdout.write(`${JSON.stringify(line)}\n`)
    return 0
  } finally {
    rmSync(spillDir, { recursive: true, force: true })
  }
}

main().then(
  (code) => {
    process.exitCode = code
  },
  (e) => {
    process.stderr.write(`bench failed: ${e?.stack ?? e}\n`)
    process.exitCode = 1
  },
)
