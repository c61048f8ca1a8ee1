#!/usr/bin/env bash
# Installs everything levee needs to build and test, and nothing twice.
#
#   scripts/deps.sh            build dependencies only
#   scripts/deps.sh --test     also the real peers and checkers the tests drive
#                              (redis, redis-sentinel, haproxy, nginx, wrk, h2load,
#                              python3-h2 and python3-grpcio (HTTP/2 clients),
#                              promtool, curl, systemd-analyze, dpkg-shlibdeps and
#                              file (CPack), python3-kubernetes, chromium) and clang with its
#                              libFuzzer runtime (tests/fuzz)
#   scripts/deps.sh --bench    also what the benchmark report needs (matplotlib)
#
# Distro packages come from the machine's own sources. A few things are not
# packaged for Debian 12 and are fetched into a git-ignored project-local
# prefix (.deps/prefix) through a throwaway apt configuration that never
# touches the system's sources, from the same Debian archive the machine's
# sources name (scripts/apt-mirror.sh; a local mirror works as well):
#   - prometheus-cpp core (Debian 13's libprometheus-cpp-core1.0 +
#     prometheus-cpp-dev; the library needs only libc6 >= 2.14, libstdc++6 >= 11)
#   - Catch2 v3 (bookworm-backports)
#   - with --test: Debian 13's python3-kubernetes (pure Python; Debian 12's
#     predates native sidecars), whose dependencies Debian 12's package brings
# On Debian 13 / Ubuntu 24.04 they come from the distro instead.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$ROOT/scripts/apt-mirror.sh"
DEPS="$ROOT/.deps"
PREFIX="$DEPS/prefix"
want_test=0; want_bench=0
for a in "$@"; do
  case "$a" in
    --test) want_test=1 ;;
    --bench) want_test=1; want_bench=1 ;;
    *) echo "deps.sh: unknown option $a" >&2; exit 2 ;;
  esac
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive

. /etc/os-release
codename="${VERSION_CODENAME:-unknown}"

missing() {  # prints the packages of "$@" that are not installed
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

apt_updated=0
apt_install() {
  local need
  need="$(missing "$@")"
  [ -z "$need" ] && return 0
  if [ "$apt_updated" -eq 0 ]; then
    $SUDO apt-get update -qq
    apt_updated=1
  fi
  # No daemon may start on install: tests start their own on loopback ports.
  local policy=/usr/sbin/policy-rc.d created=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod +x "$policy"; created=1
  fi
  echo "deps.sh: installing:" $need
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -qq --no-install-recommends $need >/dev/null
  if [ "$created" -eq 1 ]; then $SUDO rm -f "$policy"; fi
}

# python3: CMake configures the tests (on by default) with it.
build_pkgs=(build-essential cmake ninja-build pkg-config git ca-certificates python3
            libssl-dev libyaml-cpp-dev libspdlog-dev libfmt-dev libhiredis-dev libnghttp2-dev
            libgoogle-perftools-dev)
case "$codename" in
  bookworm) build_pkgs+=(libboost1.81-dev) ;;
  noble)    build_pkgs+=(libboost-dev catch2 prometheus-cpp-dev) ;;   # Ubuntu names Catch2 v3 catch2
  *)        build_pkgs+=(libboost-dev libcatch2-dev prometheus-cpp-dev) ;;
esac
apt_install "${build_pkgs[@]}"

# --- project-local prefix for what Debian 12 lacks -------------------------
fetch_local() {  # fetch_local SUITE PKG... : apt-get download + dpkg -x into the prefix
  local suite="$1"; shift
  mkdir -p "$DEPS/debs" "$PREFIX"
  apt_fetch_from "$(debian_archive_uri)" "$suite" "$DEPS/debs" "$@"
  local p
  for p in "$@"; do
    dpkg -x "$DEPS/debs/${p}"_*.deb "$PREFIX"
  done
}

if [ "$codename" = bookworm ]; then
  stamp="$PREFIX/.stamp-v2"
  if [ ! -f "$stamp" ]; then
    rm -rf "$DEPS/debs" "$PREFIX"
    fetch_local trixie libprometheus-cpp-core1.0 prometheus-cpp-dev
    fetch_local bookworm-backports libcatch2-dev
    # The unpacked files still say prefix=/usr; point them at the local prefix.
    for pc in "$PREFIX"/usr/lib/*/pkgconfig/prometheus-cpp-core.pc; do
      sed -i "s|^prefix=.*|prefix=$PREFIX/usr|" "$pc"
    done
    # The -dev package's .so symlink points at the versioned library, which
    # dpkg -x placed beside it: nothing else to fix.
    touch "$stamp"
  fi
fi

if [ "$want_test" -eq 1 ]; then
  test_pkgs=(curl redis-server redis-sentinel haproxy nginx-light wrk nghttp2-client prometheus python3-yaml
             python3 openssl procps iproute2 strace python3-h2 python3-grpcio
             systemd dpkg-dev file python3-kubernetes python3-jsonschema
             clang libclang-rt-dev)  # libFuzzer, ASan, UBSan for clang (a Recommends of clang's)
  # The admin page's browser test (headless). Ubuntu ships Chromium only as
  # a snap (its chromium-browser package is a shim that asks for the snap).
  if [ "${ID:-}" = ubuntu ]; then
    if [ ! -x /snap/bin/chromium ]; then
      if command -v snap >/dev/null && $SUDO snap install chromium; then :; else
        echo "deps.sh: Ubuntu has Chromium only as a snap, and 'snap install chromium' failed" \
             "(no snapd here?): test_admin_page will fail" >&2
      fi
    fi
  else
    test_pkgs+=(chromium)
  fi
  apt_install "${test_pkgs[@]}"
  if [ "$codename" = bookworm ] && [ ! -f "$PREFIX/.stamp-k8s-v1" ]; then
    mkdir -p "$PREFIX"
    fetch_local trixie python3-kubernetes
    touch "$PREFIX/.stamp-k8s-v1"
  fi
fi
if [ "$want_bench" -eq 1 ]; then
  apt_install python3-matplotlib python3-yaml
fi
exit 0
