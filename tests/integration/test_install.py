"""cmake --install gives a relocatable tree, and the .pc file works from the build and installed
(docs/install.md, docs/writing-a-plugin.md §6).

The build is installed into a temporary prefix, which is then moved. From the moved tree:
every plugin of both backends loads in doctor, the receiver is found under the tree, no
searched folder is the build layout under bin/ (bin/lib/...), docs and the man page are there.
A plugin author compiles the reference plugin with `pkg-config --cflags mcp-relay-plugin`
against the build tree's .pc (source headers) and against the installed one.
"""

import os
import shutil
import subprocess
import tempfile

from relay_client import run_tests, skip

BUILD = os.environ.get("RELAY_BUILD_DIR", "")
SOURCE = os.environ.get("RELAY_SOURCE_DIR", "")
PLUGINS = ["machine-local", "machine-service", "machine-docker", "transfer-ssh", "capture-x11", "capture-cua",
           "console-vnc", "capture-reference"]


def _tree():
    """A moved install of the build: (work folder, prefix)."""
    work = tempfile.mkdtemp(prefix="relay-install-")
    staged = os.path.join(work, "staged")
    r = subprocess.run(["cmake", "--install", BUILD, "--prefix", staged], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    prefix = os.path.join(work, "moved")
    os.rename(staged, prefix)
    return work, prefix


def _doctor(binary, work, **env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("MCP_RELAY_")}
    e.update({"HOME": work, "MCP_RELAY_STATE_DIR": os.path.join(work, "state"),
              "MCP_RELAY_PROJECT": work})
    e.update(env)
    return subprocess.run([binary, "doctor"], capture_output=True, text=True, env=e, cwd=work,
                          timeout=120)


def _compile_reference(pc_dir, out):
    """The command of docs/writing-a-plugin.md §6, with PKG_CONFIG_PATH=pc_dir; also checks
    that the .pc file's plugindir holds the plugins. Returns the cflags."""
    env = dict(os.environ, PKG_CONFIG_PATH=pc_dir)
    cflags = subprocess.run(["pkg-config", "--cflags", "mcp-relay-plugin", "json-c"],
                            capture_output=True, text=True, env=env)
    assert cflags.returncode == 0, cflags.stderr
    libs = subprocess.run(["pkg-config", "--libs", "json-c"], capture_output=True, text=True,
                          env=env)
    src = os.path.join(SOURCE, "plugins", "reference", "capture_reference.c")
    cmd = (["cc", "-shared", "-fPIC", "-fvisibility=hidden", "-Wl,--no-undefined"]
           + cflags.stdout.split() + [src] + libs.stdout.split() + ["-o", out])
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, (cmd, r.stderr)
    syms = subprocess.run(["nm", "-D", "--defined-only", out], capture_output=True, text=True)
    exported = [line.split()[-1] for line in syms.stdout.splitlines() if " T " in line]
    assert exported == ["relay_plugin_entry_v1"], exported
    plugindir = subprocess.run(["pkg-config", "--variable=plugindir", "mcp-relay-plugin"],
                               capture_output=True, text=True, env=env).stdout.strip()
    assert os.path.isfile(os.path.join(plugindir, "machine-local.so")), plugindir
    return cflags.stdout


def test_installed_tree_is_relocatable(binary):
    if not BUILD or shutil.which("cmake") is None:
        skip("needs RELAY_BUILD_DIR and cmake")
    work, prefix = _tree()
    try:
        for name in PLUGINS:
            assert os.path.isfile(os.path.join(prefix, "lib", "mcp-relay", "plugins", name + ".so")), name
        with open(os.path.join(prefix, "share", "man", "man1", "mcp-relay.1")) as f:
            th = f.readline()
        version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.split()[-1]
        assert th.startswith(".TH MCP-RELAY 1 ") and f'"mcp-relay {version}"' in th, (th, version)
        assert os.path.isfile(os.path.join(prefix, "share", "doc", "mcp-relay", "hosts.md"))
        installed = os.path.join(prefix, "bin", "mcp-relay")
        for backend, plugins in (("local", ["machine-local", "machine-local", "capture-x11", "console-vnc"]),
                                 ("machine-service", ["machine-service", "transfer-ssh", "capture-cua",
                                                      "console-vnc"])):
            d = _doctor(installed, work, MCP_RELAY_BACKEND=backend)
            out = d.stdout + d.stderr
            for slot, plugin in zip(("machine", "transport", "capture", "console"), plugins):
                assert any(line.startswith("ok") and f"{slot} plugin" in line and plugin in line
                           for line in out.splitlines()), (backend, slot, out)
            assert os.path.join(prefix, "libexec", "mcp-relay", "receivers") in out, out
            assert "/bin/lib/" not in out and "staged" not in out, out
        # A missing plugin names the folders searched: only the installed one exists.
        os.remove(os.path.join(prefix, "lib", "mcp-relay", "plugins", "machine-local.so"))
        d = _doctor(installed, work, MCP_RELAY_BACKEND="local")
        out = d.stdout + d.stderr
        want = "looked for machine-local.so in: %s)" % os.path.join(prefix, "lib", "mcp-relay", "plugins")
        assert d.returncode != 0 and want in out, out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_pkg_config_from_the_build_tree(binary):
    if not BUILD or shutil.which("pkg-config") is None or shutil.which("cc") is None:
        skip("needs RELAY_BUILD_DIR, pkg-config and cc")
    work = tempfile.mkdtemp(prefix="relay-pc-build-")
    try:
        cflags = _compile_reference(BUILD, os.path.join(work, "capture-reference.so"))
        assert "-I" + os.path.join(SOURCE, "core", "include") in cflags.split(), cflags
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_pkg_config_installed(binary):
    if not BUILD or shutil.which("pkg-config") is None or shutil.which("cc") is None:
        skip("needs RELAY_BUILD_DIR, pkg-config and cc")
    work, prefix = _tree()
    try:
        pc_dir = os.path.join(prefix, "lib", "pkgconfig")
        cflags = _compile_reference(pc_dir, os.path.join(work, "capture-reference.so"))
        include = [f[2:] for f in cflags.split() if f.startswith("-I")]
        assert any(os.path.realpath(i) == os.path.realpath(os.path.join(prefix, "include")) for i in include), cflags
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    run_tests(globals())
