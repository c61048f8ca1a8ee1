#!/usr/bin/env bash
# Builds the container image from the Dockerfile with podman, from a
# Debian 13 base made here with debootstrap (no registry needed), then runs
# it and checks what the Dockerfile promises. Run by hand as root; not part
# of CI (about 6 minutes on 2 cores). docs/install.md has the results.
#
#   scripts/image.sh            build levee:<version>, run the checks
#   scripts/image.sh --keep     leave the test container running
#   scripts/image.sh --no-build only run the checks on the image built last
#
# The base is scripts/platforms.sh's pristine trixie root, imported as
# debian:trixie and debian:trixie-slim, so the Dockerfile's FROM lines stay
# those of a machine that can pull them. Storage is podman's vfs driver and
# builds use chroot isolation with the host's network: this machine has
# neither overlay mounts for containers nor a container network that
# reaches the package mirror.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
keep=0; build=1
for a in "$@"; do
  case "$a" in
    --keep) keep=1 ;;
    --no-build) build=0 ;;
    *) echo "image.sh: unknown option $a" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "image.sh: run as root" >&2; exit 1; }
command -v podman >/dev/null || { echo "image.sh: apt-get install podman runc" >&2; exit 1; }
WORK="${LEVEE_PLATFORMS_DIR:-/var/tmp/levee-platforms}"
PODMAN=(podman --storage-driver vfs --cgroup-manager cgroupfs)
# crun refuses this machine's hybrid cgroup hierarchy; runc runs on it.
if command -v runc >/dev/null; then PODMAN+=(--runtime runc); fi
version="$(sed -n 's/^project(levee VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)"
tag="localhost/levee:$version"
commit="$(git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)"

# --- base ---------------------------------------------------------------------
if ! "${PODMAN[@]}" image exists docker.io/library/debian:trixie-slim; then
  scripts/platforms.sh --base-only trixie
  "${PODMAN[@]}" import "$WORK/trixie-base.tar.gz" docker.io/library/debian:trixie >/dev/null
  # -slim as Debian's images make it: no documentation, manual pages or
  # translations, now or from later installs (copyright files stay).
  slim="$(mktemp -d "$WORK/slim.XXXXXX")"
  tar -C "$slim" -xzf "$WORK/trixie-base.tar.gz"
  find "$slim/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete
  find "$slim/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$slim/usr/share/man"/* "$slim/usr/share/info"/* "$slim/usr/share/locale"/*
  mkdir -p "$slim/etc/dpkg/dpkg.cfg.d"
  printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
    'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' 'path-exclude /usr/share/locale/*' \
    >"$slim/etc/dpkg/dpkg.cfg.d/slim"
  tar -C "$slim" -cf - . | "${PODMAN[@]}" import - docker.io/library/debian:trixie-slim >/dev/null
  rm -rf "$slim"
fi

# --- build ----------------------------------------------------------------------
if [ "$build" -eq 1 ]; then
t0=$SECONDS
"${PODMAN[@]}" build --format docker --pull=never --isolation chroot --network host \
  --build-arg LEVEE_COMMIT="$commit" -t "$tag" . 2>&1 | tee "$WORK/image-build.log" | grep -E '^STEP|runtime packages|Error|error:' || true
[ "${PIPESTATUS[0]}" -eq 0 ] || { tail -30 "$WORK/image-build.log"; exit 1; }
echo "image.sh: built $tag in $((SECONDS - t0)) s"
fi

# --- checks ---------------------------------------------------------------------
# podman's default resource limits are above this machine's hard limits,
# and its healthcheck timers need systemd (they log errors without it, in
# $WORK/image-run.log): run with the machine's limits and run the
# HEALTHCHECK by hand below.
RUN=(run --ulimit "nofile=$(ulimit -Sn):$(ulimit -Hn)" --ulimit nproc=4096:4096
     --health-interval=disable --network host)
exec 2>>"$WORK/image-run.log"
fail=0
check() {  # check WHAT ACTUAL EXPECTED
  if [ "$2" = "$3" ]; then echo "  ok   $1: $2"; else echo "  FAIL $1: '$2', expected '$3'"; fail=1; fi
}
inspect() { "${PODMAN[@]}" image inspect --format "$1" "$tag"; }
echo "image.sh: checks"
check "user" "$(inspect '{{.Config.User}}')" "10001:10001"
check "healthcheck" "$(inspect '{{index .Config.Healthcheck.Test 0}}')" "CMD"
check "entrypoint" "$(inspect '{{index .Config.Entrypoint 0}}')" "/usr/local/bin/levee"
check "binaries in /usr/local/bin" "$("${PODMAN[@]}" "${RUN[@]}" --rm --entrypoint /bin/ls "$tag" /usr/local/bin | tr '\n' ' ')" "levee "
check "no compiler" "$("${PODMAN[@]}" "${RUN[@]}" --rm --entrypoint /bin/sh "$tag" -c 'command -v c++ cc cmake || echo none')" "none"

# Run it in the host's network namespace (this machine has no container
# network): the admin listener must be bound to every address, not
# loopback, for a scraper outside the container to reach it.
name="levee-image-check-$$"
"${PODMAN[@]}" "${RUN[@]}" -d --name "$name" "$tag" >/dev/null
cleanup() { [ "$keep" -eq 1 ] || "${PODMAN[@]}" rm -f "$name" >/dev/null 2>&1 || true; }
trap cleanup EXIT
up=0
for _ in $(seq 100); do
  if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9901/healthz', timeout=1)" 2>/dev/null; then up=1; break; fi
  sleep 0.1
done
check "/healthz answers" "$up" 1
check "admin bound to" "$(ss -Hltn 'sport = :9901' | awk '{print $4}' | sort -u | tr '\n' ' ')" "0.0.0.0:9901 "
check "/metrics has build and process metrics" "$(python3 -c "import urllib.request; t=urllib.request.urlopen('http://127.0.0.1:9901/metrics', timeout=2).read().decode(); print('levee_build_info' in t and 'process_start_time_seconds' in t)")" True
check "running as" "$("${PODMAN[@]}" exec "$name" /bin/sh -c 'id -u'):$("${PODMAN[@]}" top "$name" user | tail -1 | tr -d ' ')" "10001:10001"
if "${PODMAN[@]}" healthcheck run "$name" >/dev/null 2>&1; then hc=healthy; else hc=unhealthy; fi
check "HEALTHCHECK" "$hc" healthy
t1=$SECONDS
"${PODMAN[@]}" stop -t 20 "$name" >/dev/null
check "exit code after stop (drain)" "$("${PODMAN[@]}" inspect --format '{{.State.ExitCode}}' "$name")" 0
echo "  stop took $((SECONDS - t1)) s"

size="$(inspect '{{.Size}}')"
echo "image.sh: $tag: $((size / 1000000)) MB ($size bytes); layers:"
"${PODMAN[@]}" history --format '{{.Size}}\t{{.CreatedBy}}' "$tag" | cut -c1-110 | head -12
exit $fail
