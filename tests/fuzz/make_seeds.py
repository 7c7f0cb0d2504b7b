#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz/corpus/ (run from anywhere; idempotent).

The seeds are small, valid or nearly valid inputs that reach deep into each
parser; libFuzzer mutates from them. The evidence_package seeds come from
a package tests/unit/common/evidence_fixture.h writes (two runs, a diagnostic, an
extraction) and evidence_package_deliver seals: `make_seeds.py --package DIR`
serialises such a folder (see package_seed below).
"""
import io
import json
import os
import struct
import sys
import tarfile
import zlib
import hashlib

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def put(harness, name, data):
    d = os.path.join(CORPUS, harness)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- mcp_wire -----------------------------------------------------------------
WIRE = {
    "object": '{"jsonrpc":"2.0","id":1,"method":"ping"}',
    "numbers": '[0,-0,1.50,1e400,-12345678901234567890123,9223372036854775807,9223372036854775808]',
    "escapes": '{"s":"a\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00"}',
    "lone_surrogate_id": '{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}',
    "low_surrogate_id": '{"id":"x\\udc00y\\ud800"}',
    "utf8": '{"k":"h\u00e9llo \u4e16\u754c \U0001f600"}',
    "nested": "[" * 40 + "]" * 40,
    "duplicate": '{"a":1,"a":2}',
    "nul_key": '{"a\\u0000b":1}',
    "literals": '[true,false,null,"",{}]',
}

# ---- mcp_dispatch ---------------------------------------------------------------
def lines(*msgs):
    return "\n".join(json.dumps(m) if not isinstance(m, str) else m for m in msgs) + "\n"

DISPATCH = {
    "legacy_session": lines(
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "f", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
         "params": {"name": "relay_status", "arguments": {}, "_meta": {"progressToken": 7}}}),
    "modern_session": lines(
        {"jsonrpc": "2.0", "id": "a", "method": "server/discover"},
        {"jsonrpc": "2.0", "id": "b", "method": "tools/list",
         "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}},
        {"jsonrpc": "2.0", "id": "c", "method": "tools/call",
         "params": {"name": "relay_probe", "arguments": {"scope": "host"},
                    "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "progressToken": "p"}}},
        {"jsonrpc": "2.0", "id": "d", "method": "subscriptions/listen",
         "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}}),
    "batch": '[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/call",'
             '"params":{"name":"relay_search","arguments":{"name":"x"}}},{"jsonrpc":"2.0","method":"notifications/cancelled",'
             '"params":{"requestId":2}}]\n',
    "errors": lines('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"relay_stage","arguments":{"guest":"a-1","workspace":"ws\\u0000/../x"}}}',
                    '{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}',
                    '{"jsonrpc":"2.0","id":1.50,"method":"nope"}',
                    '{"jsonrpc":"1.0","id":null}', '[]', 'null', '{bad json',
                    '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"relay_status\\u0000x"}}'),
}

# ---- contract_validate: first byte = tool index (contract.h order) --------------
TOOLS = ["relay_search", "relay_probe", "relay_acquisition_capabilities", "relay_acquire", "relay_stage",
         "relay_script", "relay_image", "relay_extract", "relay_finish", "relay_release",
         "relay_console_resolve", "relay_console_open", "relay_console_cancel", "relay_status"]
ARGS = {
    "relay_search": {"name": "debian"},
    "relay_probe": {"scope": "guest", "guest": "a-1"},
    "relay_acquisition_capabilities": {},
    "relay_acquire": {"task": "t", "image": "i", "extractions": [{"name": "out", "path": "out/x.txt"}]},
    "relay_stage": {"guest": "a-1", "files": [{"local": "x", "path": "cfg/users.csv"}], "workspace": "ws"},
    "relay_script": {"guest": "a-1", "language": "shell", "inline": True, "code": "echo hi", "reason": "r",
                     "step": {"id": "s-1", "title": "t", "expected": "e"}},
    "relay_image": {"guest": "a-1", "target": {"source": "application", "name": "screens", "path": "a/b.png"}},
    "relay_extract": {"guest": "a-1", "names": ["out"]},
    "relay_finish": {"guest": "a-1"},
    "relay_release": {"guest": "a-1"},
    "relay_console_resolve": {"guest": "a-1"},
    "relay_console_open": {"guest": "a-1", "console_id": "c-1", "attempt_id": "a-1", "reason": "r",
                           "expected": "e", "userRequested": True},
    "relay_console_cancel": {"guest": "a-1", "console_id": "c-1", "attempt_id": "a-1"},
    "relay_status": {"guest": "a-1"},
}

# ---- images ---------------------------------------------------------------------
def png(width, height, color_type=2, bit_depth=8, rows=None, extra=b""):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color_type]
    if rows is None:
        rows = b"".join(b"\x00" + bytes((x * 7 + y * 3) & 0xff for x in range(width * channels)) for y in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    body = chunk(b"IHDR", ihdr) + extra
    if color_type == 3:
        body += chunk(b"PLTE", bytes(range(48)))
    return b"\x89PNG\r\n\x1a\n" + body + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def jpeg():
    # SOI, APP0, DQT, SOF0 (8x8, 1 component), DHT, SOS, a little entropy data, EOI.
    seg = lambda m, d: b"\xff" + bytes([m]) + struct.pack(">H", len(d) + 2) + d
    return (b"\xff\xd8" + seg(0xe0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00") +
            seg(0xdb, b"\x00" + bytes([1] * 64)) + seg(0xc0, b"\x08\x00\x08\x00\x08\x01\x01\x11\x00") +
            seg(0xc4, b"\x00" + bytes([0, 1] + [0] * 14) + b"\x00") + seg(0xda, b"\x01\x01\x00\x00\x3f\x00") +
            b"\x00\x00\xff\xd9")


def webp_lossless():
    # VP8L: signature 0x2f, 14-bit width-1, 14-bit height-1, alpha, version.
    w, h = 4, 3
    bits = (w - 1) | ((h - 1) << 14) | (0 << 28)
    payload = b"\x2f" + struct.pack("<I", bits) + b"\x00" * 8
    chunk = b"VP8L" + struct.pack("<I", len(payload)) + payload
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk


def webp_lossy():
    frame = b"\x10\x02\x00" + b"\x9d\x01\x2a" + struct.pack("<HH", 16, 9) + b"\x00" * 10
    chunk = b"VP8 " + struct.pack("<I", len(frame)) + frame
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk

# ---- archives ---------------------------------------------------------------------
def archive(files, extra_members=(), pax_long=False):
    index = [{"path": p, "bytes": len(d), "sha256": hashlib.sha256(d).hexdigest()} for p, d in files]
    out = io.BytesIO()
    fmt = tarfile.PAX_FORMAT if pax_long else tarfile.USTAR_FORMAT
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tf:
        def add(name, data, **kw):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mode = 0o600
            ti.mtime = 1790000000
            for k, v in kw.items():
                setattr(ti, k, v)
            tf.addfile(ti, io.BytesIO(data))
        add(".relay-index.json", json.dumps(index, separators=(",", ":")).encode())
        for p, d in files:
            add(p, d)
        for name, kind, target in extra_members:
            ti = tarfile.TarInfo(name)
            ti.type = kind
            ti.linkname = target
            tf.addfile(ti)
    return out.getvalue()

# ---- machine_service: replies captured from tests/fixtures/machine-service-standin --
MS_CAPTURED = json.loads('{"record":{"vm":"pilot-relay-t-1-6b6955","purpose":"relay-t-1","image":"ubuntu2404","image_kind":"linux","lease_id":"93460c5676f2fc1da684c0ced5768297","configuration":{"schemaVersion":1},"env":null,"state":"running","created_at":1796112237.0620883,"ttl_expires_at":1796113137.0620883,"grace_until":null,"warned":false,"ip":"127.0.0.1","cpu":null,"memory_mb":null,"disk_gb":null,"ssh_auth":"lease-key","ssh_user":"admin","ssh_verified":true,"ssh_host_trust":"lease-tofu"},"list":{"machines":{"pilot-relay-t-1-6b6955":{"vm":"pilot-relay-t-1-6b6955","purpose":"relay-t-1","image":"ubuntu2404","image_kind":"linux","lease_id":"93460c5676f2fc1da684c0ced5768297","configuration":{"schemaVersion":1},"env":null,"state":"running","created_at":1796112237.0620883,"ttl_expires_at":1796113137.0620883,"grace_until":null,"warned":false,"ip":"127.0.0.1","cpu":null,"memory_mb":null,"disk_gb":null,"ssh_auth":"lease-key","ssh_user":"admin","ssh_verified":true,"ssh_host_trust":"lease-tofu"}}},"images":{"images":{"macos26":{"kind":"macos","base_vm":"pilot-macos26-base","base_available":true,"clone_prefix":"pilot-mac-","defaults":{"cpu":6,"memory_mb":8192,"disk_gb":null},"source":"/tmp/msroot/pilot-images/images/macos26/line.conf","concurrency":{"running":0,"limit":null,"acquirable":true},"active_purposes":[]},"ubuntu2404":{"kind":"linux","base_vm":"pilot-ubuntu-base","base_available":true,"clone_prefix":"pilot-","defaults":{"cpu":6,"memory_mb":16384,"disk_gb":null},"source":"/tmp/msroot/pilot-images/images/ubuntu2404/line.conf","concurrency":{"running":0,"limit":null,"acquirable":true},"active_purposes":[]}}},"release":{"vm":"pilot-relay-t-1-6b6955","released":true,"reason":"released"}}')


def machine_service_seeds():
    health = '200\n{"ok":true,"service":"machine-service"}'
    rec = json.dumps(MS_CAPTURED["record"])
    def seed(name, op, *replies):
        put("machine_service", name, bytes([op]) + "\n----\n".join(replies).encode())
    seed("inspect", 0, health, "200\n" + rec)
    seed("renew", 1, health, "200\n" + rec)
    seed("release", 2, health, "200\n" + json.dumps(MS_CAPTURED["release"]), '404\n{"error":"not found"}')
    seed("verify_destroyed", 3, health, '404\n{"error":"not found"}')
    seed("images", 4, health, "200\n" + json.dumps(MS_CAPTURED["images"]))
    seed("catalog", 5, health, '404\n{"error":"not found"}')
    seed("find_by_purpose", 6, health, "200\n" + json.dumps(MS_CAPTURED["list"]))
    seed("acquire", 7, health, "200\n" + rec)
    seed("acquire_refused", 7, health, '409\n{"error":"image busy"}')
    seed("health_other_service", 8, '200\n{"ok":true,"service":"vm-service"}')
    put("machine_service", "options", b"\xff" + json.dumps(
        {"routePrefix": "/vms", "listKey": "vms", "nameField": "machine", "serviceName": "machine-service",
         "acquirePath": "/acquire", "fingerprintHeader": "X-Env", "maxExecTimeoutS": 60,
         "destructionCheck": "service", "sshField": "ssh"}).encode())


def main():
    for name, text in WIRE.items():
        put("mcp_wire", name, text)
    for name, text in DISPATCH.items():
        put("mcp_dispatch", name, text)
    for i, tool in enumerate(TOOLS):
        put("contract_validate", tool, bytes([i]) + json.dumps(ARGS[tool]).encode())
    put("contract_validate", "relay_stage_nul", bytes([4]) + b'{"guest":"a-1","workspace":"ws\\u0000/../../outside"}')

    p = png(16, 12)
    put("image_inspect", "png", b"\x01" + p)
    put("image_inspect", "png_palette", b"\x00" + png(5, 5, color_type=3, rows=b"".join(b"\x00" + bytes(range(5)) for _ in range(5))))
    put("image_inspect", "jpeg", b"\x02" + jpeg())
    put("image_inspect", "webp_lossless", b"\x03" + webp_lossless())
    put("image_inspect", "webp_lossy", b"\x03" + webp_lossy())
    put("image_present", "png_small", p)
    put("image_present", "png_rgba", png(9, 7, color_type=6))
    put("image_present", "png_grey16", png(6, 4, color_type=0, bit_depth=16,
                                           rows=b"".join(b"\x00" + bytes(12) for _ in range(4))))
    put("image_present", "png_wide", png(2100, 3, color_type=2,
                                         rows=b"".join(b"\x00" + bytes(2100 * 3) for _ in range(3))))
    put("image_present", "jpeg", jpeg())

    ok = [("a.txt", b"hello\n"), ("dir/b.bin", b"\x00\x01\x02")]
    put("evidence_archive", "ok", b"\x00" + archive(ok))
    put("evidence_archive", "ok_expected", b"\x02" + archive(ok))
    put("evidence_archive", "pax_long", b"\x00" + archive([("d/" + "n" * 120 + ".txt", b"x")], pax_long=True))
    put("evidence_archive", "dotdot", b"\x01" + archive([("../escape.txt", b"x")]))
    put("evidence_archive", "symlink", b"\x01" + archive(ok[:1], [("link", tarfile.SYMTYPE, "/etc/passwd")]))
    put("evidence_archive", "hardlink", b"\x01" + archive(ok[:1], [("hard", tarfile.LNKTYPE, "a.txt")]))
    put("evidence_archive", "snapshot", b"\x04" + archive([("state/snapshots/s.png", p)]))

    put("guest_frame", "frame", 'noise\n{"ok":true,"bytes":3}\n')
    put("guest_frame", "trailing", '{"a":1}\n{"b":\n')

    env = {"schemaVersion": 2, "id": "dev", "vmServiceUrl": "http://localhost:6240",
           "machctlPath": "/usr/local/bin/machctl", "tartPath": "/opt/homebrew/bin/tart",
           "tartHome": "/Users/x/.tart", "sshKeyPath": "/Users/x/.ssh/id_ed25519",
           "relayStateDir": "/tmp/relay-state", "relayPlugins": {"machine": "machine-service"}}
    put("environment_profile", "v2", json.dumps(env, indent=2))
    put("environment_profile", "v1", json.dumps({"schemaVersion": 1, "vmctlPath": "/x"}))
    put("environment_profile", "duplicate", '{"schemaVersion":2,"schemaVersion":2}')

    put("settings", "all", "\n".join([
        "MCP_RELAY_SESSION=s-1", "MCP_RELAY_BACKEND=machine-service", "MCP_RELAY_URL=http://127.0.0.1:6240/",
        'MCP_RELAY_MACHINE_SERVICE_OPTIONS={"routePrefix":"/machines","nameField":"vm","maxExecTimeoutS":60,"destructionCheck":"service"}',
        'MCP_RELAY_LOCAL_OPTIONS={"rootfs":"/var/lib/x"}', 'MCP_RELAY_TRANSFER_SSH_OPTIONS={"controlPersistSeconds":30}',
        "MCP_RELAY_GUEST_NETWORK=internet", "MCP_RELAY_ON_EXIT=release", "MCP_RELAY_CAPACITY_WAIT=30",
        "MCP_RELAY_MAX_GUESTS=4", "MCP_RELAY_SHUTDOWN_GRACE_MS=1000"]) + "\n")
    put("settings", "bad", "MCP_RELAY_MAX_GUESTS=65\nMCP_RELAY_URL=http://example.com\n")

    put("receiver_json", "request", json.dumps({"version": 1, "executionId": "run-" + "a" * 32, "language": "shell",
                                                 "argv": ["sh", "-c", "echo hi"], "timeoutMs": 60000,
                                                 "snapshots": {"before": True, "after": False},
                                                 "step": {"id": "shell-1", "title": "t\u00e9"}}))
    put("receiver_json", "escapes", '["\\ud83d\\ude00","\\u0000",-0,1.5e3,{"a":{"b":[null,true,false]}}]')
    put("receiver_json", "not_utf8", b"receiver: 1: \xff\xfe\xfd: not found")
    machine_service_seeds()
    put("transfer_ssh_options", "all", json.dumps({"ssh": "/usr/bin/ssh", "connectTimeoutSeconds": 10,
                                                   "controlPersistSeconds": 300, "spareSessions": 1}))
    put("transfer_ssh_options", "bad", '{"spareSessions":-1,"ssh":""}')
    put("transfer_ssh_options", "not_object", '[1]')


def package_seed(pkg_dir):
    """Serialises a delivered package folder as evidence_package seeds ("==> path" records):
    `delivered` (everything but the large derived index.html) and `recording` (the package
    before delivery: no manifest.json, OPENING.txt or index.html)."""
    files = []
    for dirpath, _, names in os.walk(pkg_dir):
        for n in names:
            full = os.path.join(dirpath, n)
            files.append((os.path.relpath(full, pkg_dir), open(full, "rb").read()))
    files.sort()
    def serialise(skip):
        return b"\n".join(b"==> " + rel.encode() + b"\n" + data for rel, data in files if rel not in skip)
    put("evidence_package", "delivered", serialise({"index.html"}))
    put("evidence_package", "recording", serialise({"index.html", "manifest.json", "OPENING.txt"}))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--package":
        package_seed(sys.argv[2])
    else:
        main()
