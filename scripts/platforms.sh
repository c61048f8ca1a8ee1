#!/usr/bin/env bash
# Proves the README's two commands on a fresh machine of each claimed
# platform: builds a new root with debootstrap, copies the working tree in,
# and runs `scripts/demo.sh` (until levee answers on :8080 and /metrics) and
# then `scripts/test.sh` inside it. Run by hand as root; not part of CI
# (about 20 minutes per platform on 2 cores). docs/install.md has the results.
#
#   scripts/platforms.sh [--base-only] [--shell] [SUITE...]
#     SUITE        bookworm (Debian 12), trixie (Debian 13), noble (Ubuntu 24.04);
#                  default: all three
#     --base-only  only make the pristine root tarball (scripts/image.sh uses trixie's)
#     --shell      open a shell in the root after the run, to look around
#
# Mirrors: Debian suites use this machine's own Debian archive (from its apt
# sources); Ubuntu suites use $UBUNTU_MIRROR, which you must set, since the
# machine's sources name no Ubuntu archive and this script names none.
# The Ubuntu archive key comes from Debian's ubuntu-keyring package.
#
# Work directory: $LEVEE_PLATFORMS_DIR (default /var/tmp/levee-platforms);
# SUITE-base.tar.gz is kept there (reused when present), roots are rebuilt
# from it on every run, and each run's log is SUITE.log.
#
# The command runs in its own mount and PID namespaces (chroot), sharing
# this machine's network: the tests bind loopback ports picked free, the
# demo binds 8080, 9000 and 9901, which must be free here.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${LEVEE_PLATFORMS_DIR:-/var/tmp/levee-platforms}"
base_only=0; shell=0; suites=()
for a in "$@"; do
  case "$a" in
    --base-only) base_only=1 ;;
    --shell) shell=1 ;;
    -*) echo "platforms.sh: unknown option $a" >&2; exit 2 ;;
    *) suites+=("$a") ;;
  esac
done
[ "${#suites[@]}" -gt 0 ] || suites=(bookworm trixie noble)
[ "$(id -u)" -eq 0 ] || { echo "platforms.sh: run as root (debootstrap, chroot)" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "platforms.sh: apt-get install debootstrap" >&2; exit 1; }
mkdir -p "$WORK"

# The Debian archive this machine's apt configuration points at: the URI
# serving this machine's own release.
. "$ROOT/scripts/apt-mirror.sh"

ubuntu_keyring() {  # prints a keyring file for the Ubuntu archive
  local dir="$WORK/ubuntu-keyring"
  if [ ! -f "$dir/keyring.gpg" ]; then
    mkdir -p "$dir"
    # Debian 12 has no ubuntu-keyring; Debian 13 does (arch: all).
    apt_fetch_from "$(debian_archive_uri)" trixie "$dir/debs" ubuntu-keyring
    dpkg -x "$dir"/debs/ubuntu-keyring_*.deb "$dir/x"
    cp "$dir/x/usr/share/keyrings/ubuntu-archive-keyring.gpg" "$dir/keyring.gpg"
  fi
  echo "$dir/keyring.gpg"
}

make_base() {  # make_base SUITE : $WORK/SUITE-base.tar.gz
  local suite="$1" tar="$WORK/$1-base.tar.gz" dir="$WORK/$1-base"
  [ -f "$tar" ] && return 0
  local mirror args=(--variant=minbase --include=ca-certificates)
  case "$suite" in
    noble)
      mirror="${UBUNTU_MIRROR:-}"
      if [ -z "$mirror" ]; then
        echo "platforms.sh: set UBUNTU_MIRROR to an Ubuntu archive mirror: this machine's apt sources name none" >&2
        return 1
      fi
      # A fresh Ubuntu install enables universe, where several build
      # dependencies live; debootstrap has no noble script, gutsy's is the
      # one every later Ubuntu release links to.
      args+=(--components=main,universe --keyring="$(ubuntu_keyring)")
      local script=/usr/share/debootstrap/scripts/gutsy ;;
    *)
      mirror="$(debian_archive_uri)"
      local script="" ;;
  esac
  rm -rf "$dir"
  echo "platforms.sh: debootstrap $suite from $mirror"
  local t0=$SECONDS
  debootstrap "${args[@]}" "$suite" "$dir" "$mirror" $script >"$WORK/$suite-debootstrap.log" 2>&1 \
    || { tail -20 "$WORK/$suite-debootstrap.log"; exit 1; }
  # debootstrap writes the release alone; a fresh install also has its
  # updates and security suites.
  local sec
  case "$suite" in
    noble) printf 'deb %s noble main universe\ndeb %s noble-updates main universe\ndeb %s noble-security main universe\n' \
             "$mirror" "$mirror" "$mirror" >"$dir/etc/apt/sources.list" ;;
    *) printf 'deb %s %s main\ndeb %s %s-updates main\n' "$mirror" "$suite" "$mirror" "$suite" >"$dir/etc/apt/sources.list"
       sec="$(debian_security_uri)"
       [ -n "$sec" ] && printf 'deb %s %s-security main\n' "$sec" "$suite" >>"$dir/etc/apt/sources.list" ;;
  esac
  # As Debian's own images: no downloaded packages, no package lists.
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
  tar -C "$dir" -czf "$tar" .
  rm -rf "$dir"
  echo "platforms.sh: $suite base in $((SECONDS - t0)) s: $(du -h "$tar" | cut -f1)"
}

run_in_root() {  # run_in_root DIR COMMAND : chroot in private mount + PID namespaces
  # Run in a subshell, so that unshare replaces it: then killing that
  # process ends unshare, whose --kill-child ends the whole PID namespace.
  local dir="$1" cmd="$2"
  cp /etc/resolv.conf "$dir/etc/resolv.conf"
  exec unshare --mount --pid --fork --kill-child --propagation private bash -euc '
    d="$1"
    mount -t proc proc "$d/proc"
    mount -t sysfs sys "$d/sys"
    mount --rbind /dev "$d/dev"
    mount -t tmpfs tmpfs "$d/tmp"
    mount -t tmpfs tmpfs "$d/dev/shm"
    exec chroot "$d" /usr/bin/env -i HOME=/root TERM=dumb PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      /bin/bash -c "$2"' _ "$dir" "$cmd"
}

port_answers() {  # port_answers URL
  python3 - "$1" <<'EOF'
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=1) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
EOF
}

run_suite() {
  local suite="$1" dir="$WORK/$1" log="$WORK/$1.log"
  make_base "$suite"
  [ "$base_only" -eq 1 ] && return 0
  rm -rf "$dir"; mkdir -p "$dir"
  tar -C "$dir" -xzf "$WORK/$suite-base.tar.gz"
  # The working tree as a user would have it after a clone: tracked and
  # new files, nothing git ignores (no build/, no .deps/).
  mkdir -p "$dir/root/levee"
  (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) \
    | tar -C "$dir/root/levee" -xf -
  : >"$log"
  echo "platforms.sh: $suite: demo (log: $log)"
  local t0=$SECONDS
  (run_in_root "$dir" "cd /root/levee && exec scripts/demo.sh") >>"$log" 2>&1 &
  local demo=$!
  local ok=0
  # The demo installs and builds first: allow it 20 minutes to answer.
  for _ in $(seq 1200); do
    if port_answers http://127.0.0.1:8080/ && port_answers http://127.0.0.1:9901/metrics; then ok=1; break; fi
    kill -0 "$demo" 2>/dev/null || break
    sleep 1
  done
  local demo_s=$((SECONDS - t0))
  # unshare ignores SIGTERM while it waits; SIGKILL ends it, and its
  # --kill-child then ends the namespace.
  kill -KILL "$demo" 2>/dev/null || true
  wait "$demo" 2>/dev/null || true
  # Nothing of the demo may outlive it (it holds ports 8080, 9000, 9901).
  for _ in $(seq 50); do port_answers http://127.0.0.1:9901/healthz || break; sleep 0.1; done
  if [ "$ok" -ne 1 ]; then echo "platforms.sh: $suite: demo FAILED after $demo_s s"; tail -30 "$log"; return 1; fi
  echo "platforms.sh: $suite: demo answered after $demo_s s"
  t0=$SECONDS
  echo "platforms.sh: $suite: test"
  if (run_in_root "$dir" "cd /root/levee && exec scripts/test.sh") >>"$log" 2>&1; then
    echo "platforms.sh: $suite: test passed in $((SECONDS - t0)) s: $(grep -E 'tests passed' "$log" | tail -1)"
  else
    echo "platforms.sh: $suite: test FAILED after $((SECONDS - t0)) s"; grep -E 'tests passed|Failed|\*\*\*' "$log" | tail -30
    return 1
  fi
  [ "$shell" -eq 1 ] && (run_in_root "$dir" "cd /root/levee && exec bash -i") || true
}

status=0
for s in "${suites[@]}"; do
  t0=$SECONDS
  run_suite "$s" || status=1
  echo "platforms.sh: $s: $((SECONDS - t0)) s in all"
done
exit $status
