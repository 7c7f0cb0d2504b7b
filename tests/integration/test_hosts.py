#!/usr/bin/env python3
"""docs/hosts.md's snippets, the Claude Code plugin and the pi package (issue 14 points 4-6).

Each block of docs/hosts.md marked `relay-host=<host>` is parsed in its host's format (JSON,
JSON with comments, TOML), the server entry is read where that host reads it, and the command
it names is started with its arguments and environment (the built binary standing in for
`mcp-relay`, the host's placeholders expanded as the host would) until `initialize` is
answered, the fourteen tools are listed, and relay_status names the project folder the host
means. The plugin's server, the repository's .mcp.json and the pi package start the same way;
the generated host files match scripts/gen-host-files; the operator agent has only the relay's
tools and read-only file tools; `claude plugin validate` accepts the plugin and a real Claude
Code connects to its server (the CLI is installed from npm into a cache folder; that part
skips, saying why, when npm cannot). The server instructions are spec/tools.md §4's reference text,
whole within the 2,048 characters where Claude Code cuts them."""
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from relay_client import run_tests, skip  # noqa: E402

ROOT = os.environ.get("RELAY_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOSTS_MD = os.path.join(ROOT, "docs", "hosts.md")
HOSTS = ["claude-code", "codex", "codex-trust", "cursor", "windsurf", "claude-desktop", "gemini-cli",
         "opencode", "vscode", "zed", "pi"]
PLUGIN_PREFIX = "mcp__plugin_mcp-relay_relay__"
PROJECT_PREFIX = "mcp__relay__"
CLAUDE_CODE_VERSION = os.environ.get("RELAY_CLAUDE_CODE_VERSION", "2.1.332")
INSTRUCTIONS_LIMIT = 2048  # Claude Code: "Server instructions truncated from N to 2048 chars"


# -- reading the snippets ---------------------------------------------------------------------

def snippets():
    """{host: (format, text)} of every marked block of docs/hosts.md."""
    with open(HOSTS_MD, encoding="utf-8") as f:
        text = f.read()
    found = {}
    for m in re.finditer(r"^```(\w+) relay-host=([\w-]+)\n(.*?)^```\s*$", text, re.M | re.S):
        fmt, host, body = m.groups()
        assert host not in found, "two blocks for %s in docs/hosts.md" % host
        found[host] = (fmt, body)
    return found


def strip_jsonc(text):
    """JSON with // and /* */ comments and trailing commas, as VS Code, Zed and OpenCode read it."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("//", i):
            i = text.index("\n", i) if "\n" in text[i:] else n
        elif text.startswith("/*", i):
            i = text.index("*/", i) + 2
        else:
            out.append(c)
            i += 1
    return re.sub(r",(\s*[}\]])", r"\1", "".join(out))


def parse(fmt, text):
    if fmt == "json":
        return json.loads(text)  # strict: these hosts read plain JSON
    if fmt == "jsonc":
        return json.loads(strip_jsonc(text))
    if fmt == "toml":
        return tomllib.loads(text)
    raise AssertionError("unknown snippet format %s" % fmt)


def entry_of(host, doc):
    """(command, args, env) of the relay's entry, read where the host reads it, after the
    host's own rules for that entry are checked."""
    if host in ("claude-code", "cursor", "windsurf", "claude-desktop", "gemini-cli", "pi"):
        e = doc["mcpServers"]["relay"]
    elif host == "codex":
        e = doc["mcp_servers"]["relay"]
        assert e["tool_timeout_sec"] >= 3600 and e["startup_timeout_sec"] >= 10, e
    elif host == "vscode":
        e = doc["servers"]["relay"]
        assert e["type"] == "stdio", e
    elif host == "zed":
        e = doc["context_servers"]["relay"]
    elif host == "opencode":
        e = doc["mcp"]["relay"]
        assert e["type"] == "local" and e["enabled"] is True, e
        assert isinstance(e["command"], list) and "args" not in e and "env" not in e, e
        return e["command"][0], e["command"][1:], e.get("environment", {})
    else:
        raise AssertionError(host)
    if host == "claude-code":
        assert e["type"] == "stdio", e
        # No placeholder Claude Code would warn about: it sets CLAUDE_PROJECT_DIR itself.
        assert "${" not in json.dumps(e), e
    if host == "pi":
        assert e["directTools"] is True and e["toolPrefix"] == "none", e
        assert e["lifecycle"] == "keep-alive" and e["requestTimeoutMs"] >= 3600000, e
    if host == "gemini-cli":
        assert e["timeout"] >= 3600000, e
    assert isinstance(e["command"], str) and isinstance(e.get("args", []), list), e
    return e["command"], e.get("args", []), e.get("env", {})


# -- starting a server as a host does -------------------------------------------------------------

class Session:
    """A server started from an entry; speaks newline-delimited JSON-RPC to it."""

    def __init__(self, argv, env, cwd):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, cwd=cwd)
        self.buf = b""
        self.next_id = 0

    def request(self, method, params=None, timeout=30):
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                reply = json.loads(line)  # stdout carries nothing but MCP messages
                if reply.get("id") == self.next_id:
                    return reply
            left = deadline - time.monotonic()
            assert left > 0, "no answer to %s in %d s (stderr %r)" % (method, timeout, self.stderr())
            r, _, _ = select.select([self.proc.stdout], [], [], left)
            if r:
                chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
                assert chunk, "the server closed stdout before answering %s (exit %r, stderr %r)" % (
                    method, self.proc.poll(), self.stderr())
                self.buf += chunk

    def stderr(self):
        if self.proc.poll() is None:
            return "(still running)"
        return self.proc.stderr.read().decode(errors="replace")

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


def base_env(state_dir, path_dir=None):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("MCP_RELAY_", "MCP_VM_RELAY_", "CLAUDE_")) and k != "VM_ENVIRONMENT_FILE"}
    e["MCP_RELAY_STATE_DIR"] = state_dir
    if path_dir:
        e["PATH"] = path_dir + os.pathsep + e.get("PATH", "")
    return e


def serve_and_check(argv, env, cwd, project, what):
    """initialize answered, fourteen tools listed, relay_status names `project`."""
    s = Session(argv, env, cwd)
    try:
        init = s.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                        "clientInfo": {"name": "test-hosts", "version": "1"}})
        assert init["result"]["serverInfo"]["name"] == "relay", (what, init)
        s.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        tools = s.request("tools/list")["result"]["tools"]
        assert len(tools) == 14, (what, [t["name"] for t in tools])
        res = s.request("tools/call", {"name": "relay_status", "arguments": {}})["result"]
        assert res["isError"] is False, (what, res)
        got = res["structuredContent"]["project"]
        assert got == os.path.realpath(project), "%s: project %s, expected %s" % (what, got, project)
        assert res["structuredContent"]["sessionIdentity"]["source"] in ("project", "setting"), res
    finally:
        status = s.close()
    assert status == 0, "%s: exit status %r (stderr %r)" % (what, status, s.proc.stderr.read())


class Place:
    """Temporary folders: a project, a state folder, somewhere else, a PATH folder holding
    `mcp-relay` (a link to the binary under test)."""

    def __init__(self, binary):
        self.root = tempfile.mkdtemp(prefix="relay-hosts-")
        self.project = os.path.join(self.root, "project")
        self.state = os.path.join(self.root, "state")
        self.elsewhere = os.path.join(self.root, "elsewhere")
        self.bin = os.path.join(self.root, "bin")
        for d in (self.project, self.state, self.elsewhere, self.bin):
            os.makedirs(d, mode=0o700)
        os.symlink(os.path.abspath(binary), os.path.join(self.bin, "mcp-relay"))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self.root, ignore_errors=True)
        return False


def host_start(host, command, args, env, binary, place):
    """argv, environment and working folder as `host` starts the entry."""
    argv = [os.path.abspath(binary) if os.path.basename(command) == "mcp-relay" else command] + list(args)
    e = base_env(place.state)
    for k, v in env.items():
        # The host's placeholder expansion, and the doc's example project folder.
        v = v.replace("${workspaceFolder}", place.project).replace("/home/ada/project", place.project)
        assert "${" not in v, "%s: %s=%s would reach the server unexpanded" % (host, k, v)
        e[k] = v
    cwd = place.project  # hosts that start their servers in the open project
    if host == "claude-code":
        e["CLAUDE_PROJECT_DIR"] = place.project  # Claude Code sets it for its servers
        cwd = place.elsewhere                    # ... so the working folder does not matter
    elif host in ("cursor", "vscode"):
        cwd = place.elsewhere  # the expanded ${workspaceFolder} names the project
    elif host in ("windsurf", "claude-desktop", "zed"):
        cwd = "/"  # global configurations: the entry names the project itself
    return argv, e, cwd


# -- the tests ----------------------------------------------------------------------------------

def test_every_host_has_a_snippet(binary):
    found = snippets()
    assert sorted(found) == sorted(HOSTS), "docs/hosts.md has %s, expected %s" % (sorted(found), sorted(HOSTS))
    for host, (fmt, text) in found.items():
        parse(fmt, text)  # each parses in its host's format


def test_every_snippet_starts_a_server_that_answers(binary):
    with Place(binary) as place:
        for host, (fmt, text) in sorted(snippets().items()):
            doc = parse(fmt, text)
            if host == "codex-trust":
                (path, table), = doc["projects"].items()
                assert os.path.isabs(path) and table == {"trust_level": "trusted"}, doc
                continue
            command, args, env = entry_of(host, doc)
            argv, e, cwd = host_start(host, command, args, env, binary, place)
            print("  [%s] %s" % (host, " ".join([command] + list(args))), flush=True)
            serve_and_check(argv, e, cwd, place.project, host)


def test_the_plugin_server_and_the_project_mcp_json_start(binary):
    with Place(binary) as place:
        with open(os.path.join(ROOT, ".claude-plugin", "plugin.json")) as f:
            plugin = json.load(f)
        entry = plugin["mcpServers"]["relay"]
        assert entry["command"] == "${CLAUDE_PLUGIN_ROOT}/hosts/launch", entry
        command = entry["command"].replace("${CLAUDE_PLUGIN_ROOT}", ROOT)
        # Claude Code starts a plugin's server in the project, with CLAUDE_PROJECT_DIR set; the
        # launcher finds mcp-relay on PATH.
        e = base_env(place.state, place.bin)
        e.update({"CLAUDE_PROJECT_DIR": place.project, "CLAUDE_PLUGIN_ROOT": ROOT})
        serve_and_check([command] + entry["args"], e, place.project, place.project, "plugin")
        # This repository's own .mcp.json: no placeholder, the launcher relative to the project.
        with open(os.path.join(ROOT, ".mcp.json")) as f:
            own = json.load(f)["mcpServers"]["relay"]
        assert "${" not in json.dumps(own), own
        e = base_env(place.state)
        e.update({"CLAUDE_PROJECT_DIR": ROOT, "MCP_RELAY_BINARY": os.path.abspath(binary)})
        serve_and_check([own["command"]] + own["args"], e, ROOT, ROOT, "the repository's .mcp.json")
        # Without any binary the launcher says how to get one, on stderr, and nothing on stdout.
        lone = os.path.join(place.root, "lone")
        os.makedirs(os.path.join(lone, "hosts"))
        shutil.copy(os.path.join(ROOT, "hosts", "launch"), os.path.join(lone, "hosts", "launch"))
        e = base_env(place.state)
        e["PATH"] = "/usr/bin:/bin"
        if shutil.which("mcp-relay", path=e["PATH"]):
            print("  an mcp-relay is installed in /usr/bin: the not-installed message is not reached")
            return
        p = subprocess.run([os.path.join(lone, "hosts", "launch")], env=e, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        assert p.returncode == 127 and p.stdout == b"", p
        assert b"not installed" in p.stderr and b"scripts/build" in p.stderr, p.stderr


def test_the_pi_package(binary):
    with Place(binary) as place:
        with open(os.path.join(ROOT, "pi", "package.json")) as f:
            package = json.load(f)
        assert "pi-package" in package["keywords"], package
        assert package["pi"]["mcp"] == "./mcp.json" and package["pi"]["prompts"] == ["./prompts"], package
        with open(os.path.join(ROOT, "pi", "mcp.json")) as f:
            mcp = json.load(f)
        # The package's entry is the documented one.
        fmt, text = snippets()["pi"]
        assert mcp == parse(fmt, text), "pi/mcp.json differs from the pi snippet of docs/hosts.md"
        command, args, env = entry_of("pi", mcp)
        argv, e, cwd = host_start("pi", command, args, env, binary, place)
        serve_and_check(argv, e, cwd, place.project, "pi package")
        prompts = os.listdir(os.path.join(ROOT, "pi", "prompts"))
        assert prompts == ["relay-status.md"], prompts
        with open(os.path.join(ROOT, "pi", "prompts", "relay-status.md")) as f:
            prompt = f.read()
        assert prompt.startswith("---\ndescription: ") and "relay_status" in prompt, prompt


def test_generated_files_match_their_source(binary):
    out = tempfile.mkdtemp(prefix="relay-gen-")
    try:
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen-host-files"), "--out", out], check=True)
        produced = []
        for folder, _, files in os.walk(out):
            produced += [os.path.relpath(os.path.join(folder, f), out) for f in files]
        assert sorted(produced) == sorted([
            ".claude-plugin/marketplace.json", ".claude-plugin/plugin.json", "agents/relay-operator.md",
            "commands/status.md", "pi/package.json", "pi/prompts/relay-status.md"]), produced
        stale = []
        for rel in produced:
            with open(os.path.join(out, rel), "rb") as a, open(os.path.join(ROOT, rel), "rb") as b:
                if a.read() != b.read():
                    stale.append(rel)
        assert not stale, "checked-in files differ from scripts/gen-host-files: %s (run it)" % stale
        p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen-host-files"), "--check"])
        assert p.returncode == 0
    finally:
        shutil.rmtree(out, ignore_errors=True)


def frontmatter(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert text.startswith("---\n"), path
    head, _, body = text[4:].partition("\n---\n")
    fields = {}
    for line in head.split("\n"):
        key, sep, value = line.partition(": ")
        assert sep and key and ": " not in value, "%s: a frontmatter line YAML cannot read plainly: %r" % (path, line)
        fields[key] = value
    return fields, body


def test_the_operator_agent_has_only_the_relays_tools_and_read_only_file_tools(binary):
    names = [t["name"] for t in json.loads(subprocess.run([binary, "--schema"], stdout=subprocess.PIPE,
                                                           check=True).stdout)]
    assert len(names) == 14
    fields, body = frontmatter(os.path.join(ROOT, "agents", "relay-operator.md"))
    assert fields["name"] == "relay-operator" and fields["description"], fields
    tools = [t.strip() for t in fields["tools"].split(",")]
    expected = [PLUGIN_PREFIX + n for n in names] + [PROJECT_PREFIX + n for n in names] + ["Read", "Grep", "Glob"]
    assert sorted(tools) == sorted(expected), sorted(set(tools) ^ set(expected))
    with open(os.path.join(ROOT, "core", "src", "contract", "instructions.txt")) as f:
        assert f.read().strip() in body
    fields, body = frontmatter(os.path.join(ROOT, "commands", "status.md"))
    assert sorted(t.strip() for t in fields["allowed-tools"].split(",")) == sorted([
        PROJECT_PREFIX + "relay_status", PLUGIN_PREFIX + "relay_status"]), fields
    assert "relay_status" in body and fields["description"], (fields, body)


def test_instructions_are_the_reference_text_within_2048_characters(binary):
    """spec/tools.md §4 (changed 2026-12-01): the server ships the reference text, whole, within the
    2,048 characters Claude Code keeps; each rule is there."""
    text = subprocess.run([binary, "--instructions"], stdout=subprocess.PIPE, check=True).stdout.decode()
    assert text.endswith("\n") and not text.endswith("\n\n"), repr(text[-40:])
    text = text[:-1]
    assert len(text) <= INSTRUCTIONS_LIMIT, "%d characters: Claude Code cuts at %d" % (len(text), INSTRUCTIONS_LIMIT)
    # The contract's own text (docs/spec/tools.md, a copy of the spec: docs/spec/README.md).
    with open(os.path.join(ROOT, "docs/spec/tools.md"), encoding="utf-8") as f:
        doc = f.read()
    start = doc.index("```text\n", doc.index("Reference text (decision")) + len("```text\n")
    assert text == doc[start:doc.index("\n```", start)], "not the reference text of spec/tools.md §4"
    essentials = [
        "a verified package proves its evidence intact, not that the behaviour worked",  # rule 9
        "Open console viewing only when the user asks",                                   # rule 10
        "must lie in the project folder",                                                 # rule 12
        "relay_finish or relay_release yourself",                                         # rule 8
        "maxGuests", "name it in later calls",                                            # rule 5
        "Never repeat input whose effect is uncertain",                                   # rule 7
        "A run's after-image comes with its result when ready",                           # rule 6
        "at most twice, never by repeating input",
        "it records video only where the deployment turns it on",                         # rule 3
        "After context compaction",                                                       # rule 11
        "2000 lines and 50 KiB",
    ]
    missing = [e for e in essentials if e not in text]
    assert not missing, "rules missing: %s" % missing
    assert "arrives later" not in text and "More detail" not in text, "the old text"
    for name in json.loads(subprocess.run([binary, "--schema"], stdout=subprocess.PIPE, check=True).stdout):
        assert name["name"] in text, name["name"]


# -- Claude Code itself ---------------------------------------------------------------------------

def claude_cli():
    """The Claude Code CLI from npm, installed once into a cache folder; skips when it cannot be."""
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                         "mcp-relay-tests", "claude-code-%s" % CLAUDE_CODE_VERSION)
    cli = os.path.join(cache, "node_modules", ".bin", "claude")
    if os.access(cli, os.X_OK):
        return cli
    if not shutil.which("npm"):
        skip("npm is not installed (apt-get install npm), so the Claude Code CLI cannot be")
    os.makedirs(cache, exist_ok=True)
    p = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", cache,
                        "@anthropic-ai/claude-code@%s" % CLAUDE_CODE_VERSION],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    if p.returncode != 0 or not os.access(cli, os.X_OK):
        skip("npm could not install @anthropic-ai/claude-code@%s: %s" % (
            CLAUDE_CODE_VERSION, p.stdout.decode(errors="replace")[-600:]))
    return cli


def claude(cli, args, home, cwd, env_extra=None, timeout=180):
    e = base_env(os.path.join(home, "state"))
    e.update({"HOME": home, "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"})
    e.pop("ANTHROPIC_API_KEY", None)
    e.update(env_extra or {})
    p = subprocess.run([cli] + args, cwd=cwd, env=e, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace")


def test_claude_code_validates_the_plugin_and_connects_to_it(binary):
    cli = claude_cli()
    with Place(binary) as place:
        home = os.path.join(place.root, "home")
        os.makedirs(home)
        code, out = claude(cli, ["plugin", "validate", ROOT], home, place.project)
        assert code == 0 and "Validation passed" in out, out
        code, out = claude(cli, ["plugin", "validate", os.path.join(ROOT, ".claude-plugin", "marketplace.json")],
                           home, place.project)
        assert code == 0 and "Validation passed" in out, out
        code, out = claude(cli, ["--plugin-dir", ROOT, "plugin", "details", "mcp-relay"], home, place.project)
        assert code == 0, out
        assert re.search(r"Skills \(1\)\s+status", out) and re.search(r"Agents \(1\)\s+relay-operator", out), out
        assert re.search(r"MCP servers \(1\)\s+relay", out), out
        # A real Claude Code starts the plugin's server and completes the handshake.
        code, out = claude(cli, ["--plugin-dir", ROOT, "mcp", "list"], home, place.project,
                           {"PATH": place.bin + os.pathsep + os.environ.get("PATH", "")})
        assert re.search(r"plugin:mcp-relay:relay: .*hosts/launch\s+- . Connected", out), out
        # The documented project .mcp.json draws no "Missing environment variables" warning.
        fmt, text = snippets()["claude-code"]
        with open(os.path.join(place.project, ".mcp.json"), "w") as f:
            f.write(text)
        code, out = claude(cli, ["mcp", "list"], home, place.project,
                           {"PATH": place.bin + os.pathsep + os.environ.get("PATH", "")})
        assert "relay: mcp-relay" in out and "Missing environment variables" not in out, out
        assert "diagnostics" not in out, out


if __name__ == "__main__":
    run_tests(globals())
