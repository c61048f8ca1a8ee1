#!/usr/bin/env bash
# Installs the Debian package on a fresh Debian root and boots it under
# systemd (systemd-nspawn --boot), then reports how levee.service runs:
# readiness (Type=notify), the sandbox in force, the admin port, a reload,
# a stop (drain). Run by hand as root after a build; not part of CI
# (about 2 minutes). docs/install.md has the results.
#
#   scripts/systemd-check.sh [BUILD_DIR]     default: build
#
# The root comes from scripts/platforms.sh's pristine tarball for this
# machine's release (the package's dependencies are this release's).
# The container has a private network: only its own loopback.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
WORK="${LEVEE_PLATFORMS_DIR:-/var/tmp/levee-platforms}"
[ "$(id -u)" -eq 0 ] || { echo "systemd-check.sh: run as root" >&2; exit 1; }
command -v systemd-nspawn >/dev/null || { echo "systemd-check.sh: apt-get install systemd-container" >&2; exit 1; }
. /etc/os-release
suite="$VERSION_CODENAME"

(cd "$BUILD" && cpack -G DEB >/dev/null)
deb="$(ls "$BUILD"/levee_*.deb | head -1)"
"$ROOT/scripts/platforms.sh" --base-only "$suite"
dir="$WORK/systemd-check"
rm -rf "$dir"; mkdir -p "$dir"
tar -C "$dir" -xzf "$WORK/$suite-base.tar.gz"
cp "$deb" "$dir/root/"
cp /etc/resolv.conf "$dir/etc/resolv.conf"

# Install the package the way a user would, with apt resolving its
# Depends; nothing may start in the chroot.
printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d"; chmod +x "$dir/usr/sbin/policy-rc.d"
unshare --mount --fork --propagation private bash -euc '
  d="$1"; mount -t proc proc "$d/proc"; mount --rbind /dev "$d/dev"
  chroot "$d" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive bash -euc "
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends systemd-sysv dbus curl /root/$(basename "$2") >/dev/null"' \
  _ "$dir" "$deb"
rm -f "$dir/usr/sbin/policy-rc.d"
[ -L "$dir/etc/systemd/system/multi-user.target.wants/levee.service" ] \
  || { echo "systemd-check.sh: the package did not enable levee.service" >&2; exit 1; }

cat >"$dir/root/check.sh" <<'EOF'
#!/bin/bash
exec >/root/result.txt 2>&1
show() { systemctl show levee -p "$@" | tr '\n' ' '; echo; }
echo "== booted:  $(show ActiveState -p SubState -p Type -p StatusText -p NRestarts)"
pid=$(systemctl show -p MainPID --value levee)
echo "== process: uid $(awk '/^Uid:/ {print $2}' /proc/$pid/status)," \
     "$(grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/$pid/status | tr -s '\t\n' '  ')"
echo "== admin:   /healthz $(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:9901/healthz)," \
     "$(curl -s http://127.0.0.1:9901/metrics | grep -c '^process_\|^levee_build_info') process/build samples"
echo "== proxy:   GET / -> $(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8080/) (no backend in here)"
echo "== $(systemd-analyze security levee.service --no-pager | tail -1)"
systemctl reload levee || echo "reload failed"
for _ in $(seq 100); do [ "$(systemctl show -p SubState --value levee)" = running ] && break; sleep 0.1; done
echo "== reload:  $(show ActiveState -p SubState -p NRestarts) MainPID $pid -> $(systemctl show -p MainPID --value levee)"
systemctl stop levee
echo "== stopped: $(show ActiveState -p Result -p ExecMainStatus)"
echo "== journal"; journalctl -u levee --no-pager -o short-monotonic | grep -v '"GET ' | tail -20
EOF
chmod +x "$dir/root/check.sh"
cat >"$dir/etc/systemd/system/levee-check.service" <<'EOF'
[Unit]
After=levee.service
Wants=levee.service
[Service]
Type=oneshot
ExecStart=/root/check.sh
ExecStartPost=/bin/systemctl --no-block poweroff
EOF
ln -sf /etc/systemd/system/levee-check.service "$dir/etc/systemd/system/multi-user.target.wants/"
# --keep-unit --register=no: this machine runs no systemd of its own to
# register the container with.
timeout 300 systemd-nspawn -D "$dir" --boot --private-network --register=no --keep-unit \
  >"$WORK/systemd-check-boot.log" 2>&1 || true
cat "$dir/root/result.txt"
booted="$(grep '^== booted:' "$dir/root/result.txt")"
for want in ActiveState=active SubState=running Type=notify; do
  case "$booted" in *"$want"*) ;; *) echo "systemd-check.sh: FAILED: not $want" >&2; exit 1 ;; esac
done
