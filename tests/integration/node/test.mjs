// The official MCP TypeScript SDK (1.32.2) as the client of the real mcp-relay binary.
//
//   node test.mjs /path/to/mcp-relay
//
// Legacy era: the SDK's own Client over StdioClientTransport (initialize, tools/list,
// tools/call, ping), every answer checked by the SDK itself and again with its schemas.
// Modern era (2026-07-28): raw requests carrying `_meta` through the SDK's StdioClientTransport
// (whose reader validates every incoming message with JSONRPCMessageSchema), results checked
// with the SDK's result schemas. Prints one line per check; exits 1 when any failed.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import {
    CallToolResultSchema,
    EmptyResultSchema,
    InitializeResultSchema,
    JSONRPCErrorSchema,
    JSONRPCResponseSchema,
    ListToolsResultSchema,
    ProgressNotificationSchema,
    ResultSchema
} from '@modelcontextprotocol/sdk/types.js';

const given = process.argv[2] || process.env.RELAY_BINARY;
if (!given) {
    console.error('usage: node test.mjs /path/to/mcp-relay');
    process.exit(2);
}
const binary = resolve(given); // the server runs in a temporary folder

const MODERN = '2026-07-28';
const SUPPORTED = ['2026-07-28', '2025-11-25', '2025-06-18', '2025-03-26', '2024-11-05'];
const TOOL_NAMES = [
    'relay_search', 'relay_probe', 'relay_acquisition_capabilities', 'relay_acquire', 'relay_stage',
    'relay_script', 'relay_image', 'relay_extract', 'relay_finish', 'relay_release',
    'relay_console_resolve', 'relay_console_open', 'relay_console_cancel', 'relay_status'
];

let failures = 0;
function check(name, ok, detail) {
    if (ok) {
        console.log(`PASS ${name}`);
    } else {
        failures++;
        console.log(`FAIL ${name}${detail === undefined ? '' : ': ' + (typeof detail === 'string' ? detail : JSON.stringify(detail).slice(0, 600))}`);
    }
}
function parses(name, schema, value) {
    const r = schema.safeParse(value);
    check(`${name} parses under the SDK schema`, r.success, r.success ? undefined : r.error.message);
    return r.success;
}

const root = mkdtempSync(join(tmpdir(), 'relay-sdk-'));
const env = {
    MCP_RELAY_STATE_DIR: join(root, 'state'),
    MCP_RELAY_PROJECT: root,
    TMPDIR: root
};

async function legacyEra() {
    const transport = new StdioClientTransport({ command: binary, args: [], env, stderr: 'ignore', cwd: root });
    const client = new Client({ name: 'relay-sdk-test', version: '1.0.0' });
    await client.connect(transport); // initialize (2025-11-25) + notifications/initialized, checked by the SDK
    check('legacy: server name is relay', client.getServerVersion()?.name === 'relay', client.getServerVersion());
    check('legacy: capabilities are exactly {tools: {}}',
        JSON.stringify(client.getServerCapabilities()) === '{"tools":{}}', client.getServerCapabilities());
    check('legacy: instructions present', (client.getInstructions() || '').startsWith('mcp-relay gives you'));

    // The raw initialize answer, once more through the SDK's request path and schema.
    const init = await client.request(
        { method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } } },
        InitializeResultSchema);
    check('legacy: initialize echoes 2025-06-18', init.protocolVersion === '2025-06-18', init);
    parses('legacy: initialize result', InitializeResultSchema, init);

    const list = await client.listTools();
    parses('legacy: tools/list result', ListToolsResultSchema, list);
    check('legacy: fourteen tools in order', JSON.stringify(list.tools.map(t => t.name)) === JSON.stringify(TOOL_NAMES),
        list.tools.map(t => t.name));
    check('legacy: tools/list has no modern fields', !('ttlMs' in list) && !('resultType' in list) && !('_meta' in list),
        Object.keys(list));
    check('legacy: every tool has all four hints',
        list.tools.every(t => ['readOnlyHint', 'destructiveHint', 'idempotentHint', 'openWorldHint']
            .every(h => typeof t.annotations?.[h] === 'boolean')));

    const status = await client.callTool({ name: 'relay_status', arguments: {} });
    parses('legacy: relay_status result', CallToolResultSchema, status);
    check('legacy: relay_status isError false', status.isError === false, status);
    check('legacy: relay_status structuredContent', status.structuredContent?.maxGuests === 4 &&
        Array.isArray(status.structuredContent?.guests), status.structuredContent);
    const text = status.content?.[0]?.text || '';
    const rest = text.slice(text.indexOf('\n') + 1);
    let same = false;
    try {
        same = JSON.stringify(JSON.parse(rest)) === JSON.stringify(status.structuredContent);
    } catch (e) {
        same = false;
    }
    check('legacy: text after the headline is the structuredContent', same, text.slice(0, 200));

    const invalid = await client.callTool({ name: 'relay_acquire', arguments: { image: 'x', extractions: [] } });
    parses('legacy: invalid relay_acquire result', CallToolResultSchema, invalid);
    check('legacy: invalid call is an isError result', invalid.isError === true &&
        invalid.structuredContent?.error?.code === 'invalid-input' &&
        invalid.content[0].text.startsWith('Invalid relay_acquire input:'), invalid);

    const unknown = await client.callTool({ name: 'relay_nope', arguments: {} });
    parses('legacy: unknown tool result', CallToolResultSchema, unknown);
    check('legacy: unknown tool is an isError result', unknown.isError === true &&
        unknown.content[0].text.startsWith('Unknown tool: relay_nope'), unknown);

    const release = await client.callTool({ name: 'relay_release', arguments: { guest: 'login-test-1' } });
    check('legacy: relay_release with nothing held', release.isError === true &&
        release.structuredContent?.error?.code === 'nothing-held' && release.structuredContent?.released === false, release);

    // A call with a progress token: accepted; relay_status sends no progress.
    const progress = [];
    const withToken = await client.callTool({ name: 'relay_status', arguments: {} }, CallToolResultSchema,
        { onprogress: p => progress.push(p) });
    check('legacy: call with a progress token', withToken.isError === false && progress.length === 0, progress);

    const pong = await client.ping();
    parses('legacy: ping result', EmptyResultSchema, pong);

    let rpcError = null;
    try {
        await client.request({ method: 'prompts/list', params: {} }, ResultSchema);
    } catch (e) {
        rpcError = e;
    }
    check('legacy: prompts/list is Method not found', rpcError && rpcError.code === -32601, String(rpcError));

    rpcError = null;
    try {
        await client.request({ method: 'tools/call', params: { name: 'relay_status', arguments: [] } }, CallToolResultSchema);
    } catch (e) {
        rpcError = e;
    }
    check('legacy: arguments [] is -32602', rpcError && rpcError.code === -32602, String(rpcError));

    await client.close();
}

// A raw JSON-RPC session over the SDK's own stdio transport.
function rawSession() {
    const transport = new StdioClientTransport({ command: binary, args: [], env, stderr: 'ignore', cwd: root });
    const waiting = new Map();
    const notifications = [];
    const errors = [];
    transport.onmessage = msg => {
        if ('id' in msg && waiting.has(msg.id)) {
            const resolve = waiting.get(msg.id);
            waiting.delete(msg.id);
            resolve(msg);
        } else if ('method' in msg) {
            notifications.push(msg);
        }
    };
    transport.onerror = e => errors.push(e);
    let nextId = 100;
    return {
        transport,
        notifications,
        errors,
        async start() {
            await transport.start();
        },
        request(method, params) {
            const id = nextId++;
            const p = new Promise((resolve, reject) => {
                waiting.set(id, resolve);
                setTimeout(() => reject(new Error(`no answer to ${method} within 30 s`)), 30000).unref();
            });
            transport.send({ jsonrpc: '2.0', id, method, params });
            return p;
        },
        async close() {
            await transport.close();
        }
    };
}

const meta = (extra = {}) => ({
    'io.modelcontextprotocol/protocolVersion': MODERN,
    'io.modelcontextprotocol/clientCapabilities': {},
    'io.modelcontextprotocol/clientInfo': { name: 'relay-sdk-test', version: '1.0.0' },
    ...extra
});

function modernFields(name, result) {
    check(`${name}: resultType complete`, result.resultType === 'complete', result);
    check(`${name}: serverInfo in _meta`, result._meta?.['io.modelcontextprotocol/serverInfo']?.name === 'relay', result._meta);
}

async function modernEra() {
    const s = rawSession();
    await s.start();

    // No initialize at all: the stateless revision.
    const discover = await s.request('server/discover', { _meta: meta() });
    parses('modern: server/discover response', JSONRPCResponseSchema, discover);
    const d = discover.result;
    check('modern: supportedVersions', JSON.stringify(d.supportedVersions) === JSON.stringify(SUPPORTED), d.supportedVersions);
    check('modern: discover capabilities', JSON.stringify(d.capabilities) === '{"tools":{}}', d.capabilities);
    check('modern: discover ttl and cacheScope', d.ttlMs === 3600000 && d.cacheScope === 'public', d);
    modernFields('modern: server/discover', d);

    const list = await s.request('tools/list', { _meta: meta() });
    parses('modern: tools/list response', JSONRPCResponseSchema, list);
    parses('modern: tools/list result', ListToolsResultSchema, list.result);
    check('modern: tools/list ttlMs and cacheScope', list.result.ttlMs === 3600000 && list.result.cacheScope === 'public', list.result);
    modernFields('modern: tools/list', list.result);
    check('modern: fourteen tools', list.result.tools.length === 14);

    const status = await s.request('tools/call', { name: 'relay_status', arguments: {}, _meta: meta({ progressToken: 'p-1' }) });
    parses('modern: relay_status result', CallToolResultSchema, status.result);
    check('modern: relay_status isError false', status.result.isError === false, status.result);
    modernFields('modern: relay_status', status.result);

    const invalid = await s.request('tools/call', { name: 'relay_script', arguments: { guest: 'a-1', language: 'cobol', inline: true, code: 'x' }, _meta: meta() });
    parses('modern: invalid relay_script result', CallToolResultSchema, invalid.result);
    check('modern: invalid call is an isError result', invalid.result.isError === true &&
        invalid.result.structuredContent.error.code === 'invalid-input', invalid.result);
    modernFields('modern: invalid relay_script', invalid.result);

    const ping = await s.request('ping', { _meta: meta() });
    parses('modern: ping result', ResultSchema, ping.result);
    modernFields('modern: ping', ping.result);

    const unsupported = await s.request('tools/list', { _meta: { 'io.modelcontextprotocol/protocolVersion': '1900-01-01' } });
    parses('modern: -32022 error', JSONRPCErrorSchema, unsupported);
    check('modern: -32022 lists the versions', unsupported.error?.code === -32022 &&
        JSON.stringify(unsupported.error.data?.supported) === JSON.stringify(SUPPORTED) &&
        unsupported.error.data?.requested === '1900-01-01', unsupported);

    const listen = s.request('subscriptions/listen', { _meta: meta() });
    await new Promise(r => setTimeout(r, 300));
    const ack = s.notifications.find(n => n.method === 'notifications/subscriptions/acknowledged');
    check('modern: subscriptions/listen acknowledged', ack && JSON.stringify(ack.params.notifications) === '{}', s.notifications);

    check('modern: no progress notification for relay_status',
        !s.notifications.some(n => ProgressNotificationSchema.safeParse(n).success), s.notifications);
    check('modern: the transport saw no malformed message', s.errors.length === 0, s.errors.map(String));

    // Closing stdin ends the session; the open subscription gets its closing result first.
    const closed = Promise.race([listen, new Promise(r => setTimeout(() => r(null), 10000))]);
    s.transport._process.stdin.end();
    const final = await closed;
    check('modern: subscription answered at session end', final && final.result?.resultType === 'complete' &&
        final.result._meta?.['io.modelcontextprotocol/subscriptionId'] !== undefined, final);
    await s.close();
}

try {
    await legacyEra();
    await modernEra();
} catch (e) {
    failures++;
    console.log(`FAIL unexpected exception: ${e && e.stack ? e.stack : e}`);
} finally {
    rmSync(root, { recursive: true, force: true });
}
console.log(`${failures} failed`);
process.exit(failures ? 1 : 0);
