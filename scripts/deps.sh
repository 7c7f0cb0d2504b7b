#!/usr/bin/env bash
# Installs the Debian packages mcp-relay needs that are missing.
#   scripts/deps.sh build   what building needs (and what local guests use)
#   scripts/deps.sh test    build + everything the tests start (sshd, Xvfb, chromium, the
#                           container engines of the machine-docker tests, strace, ...)
#   scripts/deps.sh ci      test + what .ci/run adds (clang, its sanitizer runtimes and ccache for the
#                           matrix and scripts/fuzz, clang-format for scripts/format, debootstrap)
set -euo pipefail
# gcc comes without the C library headers when recommends are off: libc6-dev
# (also libc.a, for the static guest programs). A fresh Debian 12 has none of
# these; tests/fresh-machine/run checks that this list is enough.
need=(cmake make gcc libc6-dev pkg-config libjson-c-dev libcurl4-openssl-dev libarchive-dev libpng-dev zlib1g-dev libssl-dev
      xvfb x11vnc xauth slirp4netns passt iproute2
      novnc ffmpeg)  # the browser live view (noVNC's client) and step recordings (ffmpeg in local guests)
level=${1:-build}
case $level in
  build|test|ci) ;;
  *) echo "scripts/deps.sh: unknown level $level (build, test or ci)" >&2; exit 2 ;;
esac
if [ "$level" != build ]; then
  need+=(libcmocka-dev libx11-dev openssh-server openssh-client x11-apps x11-xserver-utils imagemagick
         chromium python3 e2fsprogs util-linux xdotool netcat-openbsd procps ca-certificates strace
         podman crun runc uidmap fuse-overlayfs docker.io curl
         dnsmasq-base)
fi
if [ "$level" = ci ]; then
  need+=(clang clang-format libclang-rt-dev ccache debootstrap tar gzip)
fi
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ! command -v node >/dev/null 2>&1 && [ "$level" != build ]; then missing+=(nodejs npm); fi
if [ ${#missing[@]} -gt 0 ]; then
  # Not root: sudo, only here (packages are missing), and said before it asks for a password.
  # sudo resets the environment, so DEBIAN_FRONTEND goes on its command line.
  sudo_cmd=(); [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo DEBIAN_FRONTEND=noninteractive)
  echo "installing with ${sudo_cmd[0]:+sudo }apt-get: ${missing[*]}" >&2
  # Standard output and input may be an MCP stream (README: scripts/build && build/mcp-relay).
  "${sudo_cmd[@]}" apt-get update -qq </dev/null >&2
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=900 install -y -qq \
    --no-install-recommends "${missing[@]}" </dev/null >&2
fi

# TypeScript runs use tsx when the guest has it (Node 20 here lacks type stripping).
if [ "$level" != build ] && ! command -v tsx >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  echo "installing: tsx (npm)" >&2
  npm install -g --no-audit --no-fund tsx >&2 || echo "tsx could not be installed; TypeScript runs are tested as refused" >&2
fi
