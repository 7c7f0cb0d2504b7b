// MCP Tasks against the real mcp-relay binary, with the official clients:
// @modelcontextprotocol/ext-tasks 0.2.2 over @modelcontextprotocol/client 2.4.0, in both
// generations (docs/mcp.md, Tasks):
//
//   v1  2025-11-25: the client declares capabilities.tasks in initialize; ext-tasks calls the
//       tools whose execution.taskSupport is "optional" with params.task and polls tasks/get.
//   v2  2026-07-28: every request declares io.modelcontextprotocol/tasks in its client
//       capabilities; the server answers the six long tools with resultType "task".
//
// Each generation drives acquire -> stage -> a 40 s script -> finish as tasks on a
// machine-local guest, checks that a plain call on the same guest waits for the running task
// (per-guest order), cancels one run with tasks/cancel (its receipt says cancelled, nothing is
// replayed), compares task results with synchronous ones, and tries bad input. Every message
// on the wire is recorded; each task message is validated against the shipped JSON schemas
// (schema/README.md). A restarted server knows no old task id.
//
//   node test.mjs /path/to/mcp-relay        (machine-local guests: run as root today)
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { createTaskSessionFromClient, resultFromTaskOutcome } from '@modelcontextprotocol/ext-tasks/client';
import Ajv2020 from 'ajv/dist/2020.js';

const here = dirname(fileURLToPath(import.meta.url));
const given = process.argv[2] || process.env.RELAY_BINARY;
if (!given) {
    console.error('usage: node test.mjs /path/to/mcp-relay');
    process.exit(2);
}
const binary = resolve(given);
const EXT = 'io.modelcontextprotocol/tasks';
const SCRIPT_SECONDS = Number(process.env.RELAY_TASKS_SCRIPT_SECONDS || 40);

let failures = 0;
function check(name, ok, detail) {
    if (ok) console.log(`PASS ${name}`);
    else {
        failures++;
        console.log(`FAIL ${name}${detail === undefined ? '' : ': ' + (typeof detail === 'string' ? detail : JSON.stringify(detail)).slice(0, 900)}`);
    }
}

// ---- the schemas ------------------------------------------------------------------------
const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
const load = (f) => JSON.parse(readFileSync(join(here, 'schema', f), 'utf8'));
ajv.addSchema(load('mcp-2025-11-25.schema.json'), 'mcp-2025-11-25');
ajv.addSchema(load('ext-tasks-2026-07-28.schema.json'), 'ext-tasks');
ajv.addSchema(load('mcp-2026-07-28.schema.json'), 'mcp-2026-07-28');
let validated = 0;
function valid(name, schema, def, value) {
    const v = ajv.getSchema(`${schema}#/$defs/${def}`);
    if (!v) return check(`${name}: schema ${schema} has ${def}`, false);
    validated++;
    if (!v(value)) check(`${name} is a valid ${schema} ${def}`, false, { errors: v.errors, value });
}

// Every task message of a recorded session, validated by what it is.
function validateWire(gen, rec) {
    const methodOf = new Map();
    for (const m of rec.sent) if (m.method && m.id !== undefined) methodOf.set(JSON.stringify(m.id), m);
    let count = 0;
    for (const m of rec.seen) {
        if (m.method === 'notifications/tasks/status') { valid('v1 notification', 'mcp-2025-11-25', 'TaskStatusNotification', m); count++; continue; }
        if (m.method === 'notifications/tasks') { valid('v2 notification', 'ext-tasks', 'TaskStatusNotification', m); count++; continue; }
        if (m.id === undefined || m.method) continue;
        const req = methodOf.get(JSON.stringify(m.id));
        if (!req) continue;
        const isTaskCall = req.method === 'tools/call' && m.result && (m.result.task || m.result.resultType === 'task');
        if (!req.method.startsWith('tasks/') && !isTaskCall && !(req.method === 'initialize' || req.method === 'tools/list')) continue;
        count++;
        if (m.error) {
            valid(`${gen} ${req.method} error`, gen === 'v1' ? 'mcp-2025-11-25' : 'mcp-2026-07-28',
                gen === 'v1' ? 'JSONRPCErrorResponse' : 'JSONRPCErrorResponse', m);
            continue;
        }
        const r = m.result;
        if (gen === 'v1') {
            const def = { 'tools/call': 'CreateTaskResult', 'tasks/get': 'GetTaskResult', 'tasks/cancel': 'CancelTaskResult',
                'tasks/list': 'ListTasksResult', 'tasks/result': 'CallToolResult', initialize: 'InitializeResult',
                'tools/list': 'ListToolsResult' }[req.method];
            valid(`v1 ${req.method} result`, 'mcp-2025-11-25', def, r);
            if (req.method === 'tasks/result') valid('v1 tasks/result payload', 'mcp-2025-11-25', 'GetTaskPayloadResult', r);
        } else {
            const def = { 'tools/call': 'CreateTaskResult', 'tasks/get': 'GetTaskResult', 'tasks/cancel': 'CancelTaskResult',
                'tasks/update': 'UpdateTaskResult' }[req.method];
            if (def) valid(`v2 ${req.method} result`, 'ext-tasks', def, r);
            if (req.method === 'tasks/get' && r.status === 'completed') valid('v2 completed task result', 'mcp-2026-07-28', 'CallToolResult', r.result);
        }
    }
    for (const m of rec.sent) {
        if (m.method === 'tasks/get' && typeof m.params?.taskId === 'string') valid(`${gen} tasks/get request`, gen === 'v1' ? 'mcp-2025-11-25' : 'ext-tasks', 'GetTaskRequest', m);
        if (m.method === 'tasks/cancel' && typeof m.params?.taskId === 'string') valid(`${gen} tasks/cancel request`, gen === 'v1' ? 'mcp-2025-11-25' : 'ext-tasks', 'CancelTaskRequest', m);
    }
    return count;
}

// ---- a recording transport with a raw request path ---------------------------------------
// Wraps the SDK's StdioClientTransport: records every message both ways, and answers the raw
// requests (ids "raw-N") itself, which ext-tasks needs for V2 task wire shapes (its
// rawDispatch) and this test for bad input.
class Recording {
    constructor(inner) { this.inner = inner; this.seen = []; this.sent = []; this.raw = new Map(); this.n = 0; }
    async start() {
        this.inner.onmessage = (m) => {
            this.seen.push(m);
            if (m.id !== undefined && !m.method && this.raw.has(m.id)) {
                const done = this.raw.get(m.id);
                this.raw.delete(m.id);
                done(m);
                return;
            }
            this.onmessage?.(m);
        };
        this.inner.onclose = () => this.onclose?.();
        this.inner.onerror = (e) => this.onerror?.(e);
        return this.inner.start();
    }
    async send(m, options) { this.sent.push(m); return this.inner.send(m, options); }
    async close() { return this.inner.close(); }
    setProtocolVersion(v) { this.inner.setProtocolVersion?.(v); }
    async request(method, params) {
        const id = `raw-${++this.n}`;
        const answer = new Promise((res) => this.raw.set(id, res));
        await this.send({ jsonrpc: '2.0', id, method, ...(params === undefined ? {} : { params }) });
        return answer;
    }
    rawDispatch = async (request) => {
        const m = await this.request(request.method, request.params);
        return 'error' in m ? { kind: 'error', error: m.error } : { kind: 'result', result: m.result };
    };
}

const root = mkdtempSync(join(tmpdir(), 'relay-tasks-'));
const project = join(root, 'project');
mkdirSync(join(project, 'fixtures'), { recursive: true });
writeFileSync(join(project, 'fixtures', 'hello.txt'), 'hello from the host\n');
function env(stateDir) {
    return { PATH: process.env.PATH, HOME: process.env.HOME || root, TMPDIR: root, MCP_RELAY_STATE_DIR: stateDir,
        MCP_RELAY_PROJECT: project, MCP_RELAY_SESSION: 'tasks-test' };
}

async function connect(gen, stateDir) {
    const rec = new Recording(new StdioClientTransport({ command: binary, args: [], env: env(stateDir), cwd: root, stderr: 'inherit' }));
    const modern = gen === 'v2';
    const capabilities = modern ? { extensions: { [EXT]: {} } } : { tasks: { list: {}, cancel: {}, requests: {} } };
    const client = new Client({ name: `relay-tasks-${gen}`, version: '1.0.0' },
        { capabilities, ...(modern ? { versionNegotiation: { mode: { pin: '2026-07-28' } } } : {}) });
    await client.connect(rec);
    const framing = { protocolVersion: '2026-07-28', clientInfo: { name: `relay-tasks-${gen}`, version: '1.0.0' }, clientCapabilities: capabilities };
    const session = createTaskSessionFromClient(client, {
        endpointId: `relay-${gen}`, ...(modern ? { rawDispatch: rec.rawDispatch, v2RequestFraming: framing } : {})
    });
    return { client, rec, session, framing };
}

// Raw requests carry the generation's framing.
function framed(gen, params, withExtension = true) {
    if (gen === 'v1') return params;
    const caps = withExtension ? { extensions: { [EXT]: {} } } : {};
    return { ...params, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28',
        'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '1' }, 'io.modelcontextprotocol/clientCapabilities': caps } };
}

const sc = (result) => result.structuredContent || {};
const textOf = (result) => (result.content || []).filter((b) => b.type === 'text').map((b) => b.text).join('\n');

// The task's final result as the wire carried it (key order kept): tasks/get's `result`
// (2026-07-28), tasks/result without its related-task _meta (2025-11-25).
async function wireResult(gen, rec, taskId) {
    if (gen === 'v2') return (await rec.request('tasks/get', framed(gen, { taskId }))).result?.result;
    const r = (await rec.request('tasks/result', { taskId })).result || {};
    const { _meta, ...rest } = r;
    return _meta?.['io.modelcontextprotocol/related-task']?.taskId === taskId ? rest : { missingRelatedTask: r };
}
function deepEqual(a, b) {
    if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') return a === b;
    if (Array.isArray(a) !== Array.isArray(b)) return false;
    const ka = Object.keys(a), kb = Object.keys(b);
    return ka.length === kb.length && ka.every((k) => deepEqual(a[k], b[k]));
}

// The task's result was rendered as a synchronous one is: the text is the headline and the
// indented structuredContent (mcp.md, Tools and their results).
function renderedLikeSync(name, result) {
    const text = textOf(result);
    const nl = text.indexOf('\n{\n'); /* after the headline (and relay_script's lead line) */
    const end = text.indexOf('\n}', nl + 1);
    const body = JSON.parse(text.slice(nl + 1, end + 2));
    check(`${name}: text = headline + structuredContent`, nl > 0 && typeof result.isError === 'boolean' &&
        Object.keys(body).every((k) => JSON.stringify(body[k]) === JSON.stringify(sc(result)[k])), text.slice(0, 400));
}

async function asTask(gen, session, name, args) {
    const execution = await session.callTool(name, args, { task: { preference: 'require' } });
    const settled = await execution.settle();
    const result = resultFromTaskOutcome(settled.outcome);
    return { execution, result, settled };
}

async function lastTaskId(rec) {
    for (let i = rec.seen.length - 1; i >= 0; i--) {
        const r = rec.seen[i].result;
        if (r && (r.task?.taskId || (r.resultType === 'task' && r.taskId))) return r.task?.taskId || r.taskId;
    }
    return undefined;
}

async function waitFor(what, pred, ms = 60000) {
    const end = Date.now() + ms;
    for (;;) {
        const v = await pred();
        if (v) return v;
        if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
        await new Promise((r) => setTimeout(r, 250));
    }
}

async function generation(gen) {
    const stateDir = join(root, `state-${gen}`);
    const { client, rec, session } = await connect(gen, stateDir);
    const raw = (method, params, ext = true) => rec.request(method, framed(gen, params, ext));
    // A plain call: 2025-11-25 without params.task; 2026-07-28 without the extension declared
    // (this client's own requests declare it, so the server may answer those with a task).
    const plainCall = async (name, args) => {
        const m = await raw('tools/call', { name, arguments: args }, false);
        if (!m.result) throw new Error(`tools/call ${name}: ${JSON.stringify(m)}`);
        return m.result;
    };
    let guest;
    try {
        if (gen === 'v1') {
            const init = rec.seen.find((m) => m.result?.protocolVersion);
            check('v1: initialize declares the server tasks capability', JSON.stringify(init?.result?.capabilities?.tasks) ===
                '{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}', init?.result?.capabilities);
            const tools = (await client.listTools()).tools;
            const optional = tools.filter((t) => t.execution?.taskSupport === 'optional').map((t) => t.name).sort();
            check('v1: the six long tools are taskSupport optional', JSON.stringify(optional) ===
                JSON.stringify(['relay_acquire', 'relay_extract', 'relay_finish', 'relay_release', 'relay_script', 'relay_stage']), optional);
            await session.listTools?.();
        } else {
            const d = await raw('server/discover', {});
            check('v2: server/discover declares the extension to a client that declares it',
                JSON.stringify(d.result?.capabilities) === `{"tools":{},"extensions":{"${EXT}":{}}}`, d.result?.capabilities);
            const plain = await raw('server/discover', {}, false);
            check('v2: ... and not to one that does not', JSON.stringify(plain.result?.capabilities) === '{"tools":{}}', plain.result?.capabilities);
        }

        // acquire -> stage -> a 40 s script -> finish, every one a task.
        const acq = await asTask(gen, session, 'relay_acquire', { task: `tasks-${gen}`, image: 'local', extractions: [] });
        guest = sc(acq.result).guest;
        if (acq.result.isError && /root/.test(textOf(acq.result)) && process.env.RELAY_TESTS_STRICT !== '1') {
            console.log(`SKIP machine-local gives no guest to this relay: ${textOf(acq.result).split('\n')[0]}`);
            process.exit(0);
        }
        check(`${gen}: relay_acquire as a task gave a guest`, acq.result.isError === false && typeof guest === 'string', textOf(acq.result).slice(0, 600));
        renderedLikeSync(`${gen}: acquire`, acq.result);
        const acqId = await lastTaskId(rec);
        const stg = await asTask(gen, session, 'relay_stage', { guest, files: [{ local: 'fixtures/hello.txt', path: 'hello.txt' }] });
        check(`${gen}: relay_stage as a task`, stg.result.isError === false, textOf(stg.result).slice(0, 600));
        const staged = sc(stg.result).files?.[0]?.remote;

        const t0 = Date.now();
        const longRun = await session.callTool('relay_script', { guest, language: 'shell', inline: true,
            code: `sleep ${SCRIPT_SECONDS}; cat '${staged}'; echo long-done` }, { task: { preference: 'require' } });
        const longId = await lastTaskId(rec);
        // Polled by hand too: working, a status message, pollInterval(Ms).
        await new Promise((r) => setTimeout(r, 3000));
        const polled = await raw('tasks/get', { taskId: longId });
        const p = polled.result || {};
        check(`${gen}: tasks/get of the running script is working`, p.status === 'working', polled);
        check(`${gen}: ... with a status message and a poll interval`, typeof p.statusMessage === 'string' && p.statusMessage.length > 0 &&
            (gen === 'v1' ? p.pollInterval : p.pollIntervalMs) > 0, p);
        // After the run's first progress (15 s in), the status message is that progress text.
        const midPoll = SCRIPT_SECONDS >= 20 ? new Promise((res) => setTimeout(() => res(raw('tasks/get', { taskId: longId })), 16000)) : undefined;
        // A plain call for the same guest waits for the task (per-guest order).
        const plain = await plainCall('relay_script', { guest, language: 'shell', inline: true, code: 'echo plain' });
        const plainAt = Date.now();
        if (midPoll) {
            const mid = (await midPoll).result || {};
            check(`${gen}: the status message follows the run's progress`, mid.status === 'working' &&
                /limit/.test(mid.statusMessage || '') && mid.statusMessage !== p.statusMessage, { first: p.statusMessage, mid });
        }
        const longSettled = await longRun.settle();
        const longResult = resultFromTaskOutcome(longSettled.outcome);
        check(`${gen}: the ${SCRIPT_SECONDS} s script ran to its end as a task`, longResult.isError === false &&
            sc(longResult).stdout === 'hello from the host\nlong-done\n' && Date.now() - t0 >= SCRIPT_SECONDS * 1000, sc(longResult));
        renderedLikeSync(`${gen}: script`, longResult);
        check(`${gen}: the plain call on the same guest waited for the task`, sc(plain).stdout === 'plain\n' &&
            plainAt - t0 >= SCRIPT_SECONDS * 1000, { ms: plainAt - t0, plain: sc(plain) });
        const after = await raw('tasks/get', { taskId: longId });
        check(`${gen}: tasks/get of the finished script says completed`, after.result?.status === 'completed', after.result);
        const longWire = await wireResult(gen, rec, longId);
        check(`${gen}: the result ext-tasks settled with is the task's result on the wire`, deepEqual(
            Object.fromEntries(Object.entries(longWire).filter(([k]) => k !== '_meta' && k !== 'resultType')),
            Object.fromEntries(Object.entries(longResult).filter(([k]) => k !== '_meta' && k !== 'resultType'))), { longWire, longResult });

        // A run cancelled with tasks/cancel: the same cancellation as notifications/cancelled.
        const ev = sc(acq.result).evidencePath;
        const receipts = join(ev, 'host', 'receipts');
        const before = new Set(existsSync(receipts) ? readdirSync(receipts) : []);
        const subs = join(ev, 'host', 'submissions');
        const subsBefore = new Set(existsSync(subs) ? readdirSync(subs) : []);
        const doomed = await session.callTool('relay_script', { guest, language: 'shell', inline: true,
            code: 'sleep 60.321; echo never' }, { task: { preference: 'require' } });
        const doomedId = await lastTaskId(rec);
        await waitFor('the submission', () => existsSync(subs) && readdirSync(subs).some((f) => !subsBefore.has(f)));
        await new Promise((r) => setTimeout(r, 4000));
        const cancelled = await raw('tasks/cancel', { taskId: doomedId });
        check(`${gen}: tasks/cancel is acknowledged`, gen === 'v1' ? cancelled.result?.status === 'cancelled' :
            cancelled.result?.resultType === 'complete', cancelled);
        await doomed.settle().catch(() => undefined);
        const doomedGet = await raw('tasks/get', { taskId: doomedId });
        check(`${gen}: the cancelled task says cancelled`, doomedGet.result?.status === 'cancelled', doomedGet.result);
        const receipt = await waitFor('the cancelled run\'s receipt', () => {
            const fresh = existsSync(receipts) ? readdirSync(receipts).filter((f) => !before.has(f)) : [];
            return fresh.length ? JSON.parse(readFileSync(join(receipts, fresh[0]), 'utf8')) : undefined;
        });
        check(`${gen}: the run's record says cancelled`, receipt.outcome?.kind === 'uncertain' && /cancel/.test(receipt.outcome?.diagnostic || ''), receipt);
        // Nothing replayed: a later status shows the guest idle and no new run starts on its own.
        await new Promise((r) => setTimeout(r, 2000));
        const runsNow = readdirSync(subs).length;
        await new Promise((r) => setTimeout(r, 2000));
        check(`${gen}: nothing is replayed after the cancellation`, readdirSync(subs).length === runsNow &&
            readdirSync(receipts).filter((f) => !before.has(f)).length === 1, readdirSync(subs));
        const again = await raw('tasks/cancel', { taskId: doomedId });
        if (gen === 'v1') check('v1: cancel of a finished task is -32602', again.error?.code === -32602 && /already cancelled/.test(again.error.message), again);
        else check('v2: cancel of a finished task is acknowledged and changes nothing', again.result?.resultType === 'complete', again);

        // Task results equal the synchronous path's: the same call both ways, byte for byte.
        // (Calls whose answer does not change between two tries: refusals before anything runs.)
        for (const [name, args] of [['relay_stage', { guest, files: [{ local: 5, path: 'x.txt' }] }],
            ['relay_release', { guest: 'tasks-unknown-1' }], ['relay_extract', { guest: 'tasks-unknown-1' }],
            ['relay_script', { guest, language: 'cobol', inline: true, code: 'DISPLAY 1' }]]) {
            const sync = await plainCall(name, args);
            await asTask(gen, session, name, args);
            const wire = await wireResult(gen, rec, await lastTaskId(rec));
            check(`${gen}: ${name} as a task equals the synchronous result`, deepEqual(wire, sync) && sync.isError === true, { wire, sync });
        }

        // Bad input, each answered as the schema says.
        const unknown = await raw('tasks/get', { taskId: 'no-such-task' });
        check(`${gen}: tasks/get of an unknown id is -32602 naming it`, unknown.error?.code === -32602 && /no-such-task/.test(unknown.error.message), unknown);
        const malformed = await raw('tasks/get', { taskId: 7 });
        check(`${gen}: tasks/get with a number taskId is -32602`, malformed.error?.code === -32602 && /taskId/.test(JSON.stringify(malformed.error)), malformed);
        const missing = await raw('tasks/cancel', {});
        check(`${gen}: tasks/cancel without taskId is -32602`, missing.error?.code === -32602, missing);
        if (gen === 'v2') {
            const undeclared = await raw('tasks/get', { taskId: longId }, false);
            check('v2: tasks/get without the extension declared is -32021', undeclared.error?.code === -32021 &&
                JSON.stringify(undeclared.error.data) === `{"requiredCapabilities":{"extensions":{"${EXT}":{}}}}`, undeclared);
            const legacyGet = await rec.request('tasks/get', { taskId: longId });
            check('v2: tasks/get in the legacy era (no capabilities.tasks) is -32601, as before tasks', legacyGet.error?.code === -32601 &&
                legacyGet.error.message === 'Method not found', legacyGet);
            const update = await raw('tasks/update', { taskId: longId, inputResponses: {} });
            check('v2: tasks/update of a task that asks nothing is acknowledged', update.result?.resultType === 'complete', update);
            // notifications/tasks through subscriptions/listen with a task filter.
            const watched = await session.callTool('relay_script', { guest, language: 'shell', inline: true, code: 'sleep 2; echo watched' },
                { task: { preference: 'require' } });
            const watchedId = await lastTaskId(rec);
            const listenId = `listen-${Date.now()}`;
            await rec.send({ jsonrpc: '2.0', id: listenId, method: 'subscriptions/listen', params: framed('v2', { notifications: { taskIds: [watchedId, 'no-such-task'] } }) });
            await watched.settle();
            const ack = await waitFor('the acknowledgement', () => rec.seen.find((m) => m.method === 'notifications/subscriptions/acknowledged' &&
                m.params?._meta?.['io.modelcontextprotocol/subscriptionId'] === listenId), 10000);
            check('v2: listen accepts the known task id only', JSON.stringify(ack.params.notifications.taskIds) === JSON.stringify([watchedId]), ack);
            const note = await waitFor('notifications/tasks', () => rec.seen.find((m) => m.method === 'notifications/tasks' && m.params?.taskId === watchedId), 30000);
            check('v2: notifications/tasks carries the completed task with its result', note.params.status === 'completed' &&
                sc(note.params.result).stdout === 'watched\n', note);
            const noExt = await raw('subscriptions/listen', { notifications: { taskIds: [watchedId] } }, false);
            check('v2: a task filter without the extension is -32021', noExt.error?.code === -32021, noExt);
        } else {
            const list = await raw('tasks/list', {});
            check('v1: tasks/list lists this session\'s tasks', Array.isArray(list.result?.tasks) && list.result.tasks.some((t) => t.taskId === longId), list);
            const forbidden = await rec.request('tools/call', { name: 'relay_status', arguments: {}, task: {} });
            check('v1: a task for a tool without taskSupport is -32601', forbidden.error?.code === -32601, forbidden);
            const badTask = await rec.request('tools/call', { name: 'relay_stage', arguments: { guest }, task: 5 });
            check('v1: params.task that is not an object is -32602', badTask.error?.code === -32602, badTask);
            const statuses = rec.seen.filter((m) => m.method === 'notifications/tasks/status');
            check('v1: notifications/tasks/status announced the ends', statuses.some((m) => m.params.taskId === longId && m.params.status === 'completed'), statuses.length);
        }

        // finish as a task.
        const fin = await asTask(gen, session, 'relay_finish', { guest });
        check(`${gen}: relay_finish as a task verified the package`, fin.result.isError === false, textOf(fin.result).slice(0, 600));
        guest = undefined;
        const n = validateWire(gen, rec);
        check(`${gen}: ${n} task messages validated against the schemas`, n > 15, n);
        return { acqId };
    } finally {
        if (guest) await plainCall('relay_release', { guest }).catch(() => undefined);
        await session.close().catch(() => undefined);
        await client.close().catch(() => undefined);
    }
}

// After a restart an old id is unknown.
async function restart(gen, oldId) {
    const { client, rec, session } = await connect(gen, join(root, `state-${gen}`));
    try {
        const r = await rec.request('tasks/get', framed(gen, { taskId: oldId }));
        check(`${gen}: after a restart, tasks/get of an old id is -32602 unknown`, r.error?.code === -32602 &&
            /no task of this server process/.test(r.error.message), r);
        const st = await client.callTool({ name: 'relay_status', arguments: {} }); // not a long tool: never a task
        check(`${gen}: ... and relay_status shows no guest held`, sc(st).guests?.length === 0, sc(st));
        validateWire(gen, rec);
    } finally {
        await session.close().catch(() => undefined);
        await client.close().catch(() => undefined);
    }
}

try {
    for (const gen of (process.env.RELAY_TASKS_GENERATIONS || 'v2,v1').split(',')) {
        const { acqId } = await generation(gen);
        await restart(gen, acqId);
    }
    check(`${validated} schema validations ran`, validated > 40, validated);
} catch (e) {
    check('the test ran to its end', false, e.stack || String(e));
} finally {
    rmSync(root, { recursive: true, force: true });
}
console.log(failures ? `${failures} failed` : 'all passed');
process.exit(failures ? 1 : 0);
