#!/usr/bin/env bash
# Installs everything levee needs to build and test, and nothing twice.
#
#   scripts/deps.sh            build dependencies only
#   scripts/deps.sh --test     also the real peers the tests drive
#                              (redis, haproxy, nginx, wrk, h2load, promtool, curl)
#                              and clang with its libFuzzer runtime (tests/fuzz)
#   scripts/deps.sh --bench    also what the benchmark report needs (matplotlib)
#
# Distro packages come from the machine's own sources. Two things are not
# packaged for Debian 12 and are fetched into a git-ignored project-local
# prefix (.deps/prefix) through a throwaway apt configuration that never
# touches the system's sources:
#   - prometheus-cpp core (Debian 13's libprometheus-cpp-core1.0 +
#     prometheus-cpp-dev; the library needs only libc6 >= 2.14, libstdc++6 >= 11)
#   - Catch2 v3 (bookworm-backports)
# On Debian 13 / Ubuntu 24.04 both come from the distro instead.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
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

build_pkgs=(build-essential cmake ninja-build pkg-config git ca-certificates
            libssl-dev libyaml-cpp-dev libspdlog-dev libfmt-dev libhiredis-dev)
case "$codename" in
  bookworm) build_pkgs+=(libboost1.81-dev) ;;
  *)        build_pkgs+=(libboost-dev libcatch2-dev libprometheus-cpp-dev) ;;
esac
apt_install "${build_pkgs[@]}"

# --- project-local prefix for what Debian 12 lacks -------------------------
fetch_local() {  # fetch_local SUITE PKG... : apt-get download + dpkg -x
  local suite="$1"; shift
  local apt="$DEPS/apt"
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/etc" "$DEPS/debs" "$PREFIX"
  echo "deb http://deb.debian.org/debian $suite main" > "$apt/etc/sources.list"
  : > "$apt/status"
  local opts=(-o "Dir::Etc::SourceList=$apt/etc/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
              -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache"
              -o "Dir::State::Status=$apt/status" -o "Dir::Etc::Preferences=/dev/null"
              -o "Dir::Etc::PreferencesParts=/dev/null" -o "APT::Get::List-Cleanup=0"
              -o "Debug::NoLocking=1" -o "APT::Sandbox::User=root")
  apt-get "${opts[@]}" update -qq
  (cd "$DEPS/debs" && apt-get "${opts[@]}" download "$@" >/dev/null)
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
  test_pkgs=(curl redis-server haproxy nginx-light wrk nghttp2-client prometheus python3-yaml
             python3 openssl procps iproute2
             clang libclang-rt-dev)  # libFuzzer, ASan, UBSan for clang (a Recommends of clang's)
  apt_install "${test_pkgs[@]}"
fi
if [ "$want_bench" -eq 1 ]; then
  apt_install python3-matplotlib python3-yaml
fi
exit 0
