# CPack: `cpack -G DEB` in the build folder makes mcp-relay_<version>_<arch>.deb
# from the install rules (docs/install.md). Installed under /usr: the
# executable finds its plugins and receivers relative to itself, so the
# package needs no configuration.
set(CPACK_PACKAGE_NAME mcp-relay)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "mcp-relay maintainers")
set(CPACK_PACKAGE_CONTACT "mcp-relay maintainers <maintainers@users.noreply.a-seed-968ff762.example>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "MCP server giving AI agents fresh guest machines with recorded, reviewable runs")
set(CPACK_PACKAGE_DESCRIPTION
    "mcp-relay is an MCP server over stdio that gives an AI agent fresh, dedicated machines
(guests) and runs recorded scripts in them. Each run is journaled by a receiver inside
the guest and ends up in an evidence package with a SHA-256 manifest that a person
reviews later. The embedded default backend runs guests as namespace sandboxes on
this machine.")
set(CPACK_RESOURCE_FILE_LICENSE ${CMAKE_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
set(CPACK_SOURCE_GENERATOR TGZ)
set(CPACK_SOURCE_IGNORE_FILES "/\\\\.git/" "/build[^/]*/" "/node_modules/" "__pycache__")

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)

# Shared libraries: json-c and libcrypto are linked; libcurl, libarchive,
# libpng and zlib are loaded on first use (core/src/cli/lazy_libs.cmake), so
# dpkg-shlibdeps would miss them: the list is spelled out (Debian 12 names).
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libc6 (>= 2.34), libjson-c5 (>= 0.15), libcurl4 (>= 7.16.2), libarchive13 (>= 3.3), libpng16-16 (>= 1.6.2), zlib1g (>= 1:1.2.3.4), libssl3 (>= 3.0)")
# What local guests use when present (docs/machine-local.md): Xvfb and xauth
# for guest displays and snapshots, x11vnc for the console, slirp4netns or
# pasta (passt) for guest networking; openssh-client for transfer-ssh; novnc for
# the browser live view (MCP_RELAY_VNC_VIEWER=browser); ffmpeg for step
# recordings in local guests (MCP_RELAY_RECORD=video).
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "xvfb, xauth, x11vnc, slirp4netns | passt, openssh-client, novnc, ffmpeg")
include(CPack)
