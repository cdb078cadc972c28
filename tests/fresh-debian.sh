#!/usr/bin/env bash
# The README's test command on a freshly installed Debian, as a newcomer's machine would be:
# a bookworm root made by debootstrap (minbase) with only git, ca-certificates and python3 in
# it (no compiler, psql, Java, Chromium or Node.js), a clone of this repository's HEAD, and
# `bash tests/run-all.sh` inside it, which must install the rest itself. Not part of CI (it
# needs root, mounts and a Debian mirror); run it by hand after changing what the tests need:
#
#   sudo bash tests/fresh-debian.sh            # root in /srv/calibsql-fresh-debian
#
# What comes from the host, because a fresh machine would get it another way:
#   - the Rust toolchain (~/.cargo, ~/.rustup, bind-mounted): rustup's installer is the
#     README's first step;
#   - the certificate authorities in /usr/local/share/ca-certificates and the *_CA_BUNDLE /
#     PIP_CERT variables: a network that intercepts TLS needs them on any machine;
#   - with FRESH_CACHE=overlay (the default), the host's cargo target dir under an overlay
#     (read below, written above, the host's left as it was), so the crates already built are
#     not built again; FRESH_CACHE=cold builds everything (about 35 minutes more on 2 cores).
# The root is made once and kept ($FRESH_ROOT); `rm -rf` it to start again from nothing.
# FRESH_COMMAND replaces the command run in the clone (default `bash tests/run-all.sh`).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
root="${FRESH_ROOT:-/srv/calibsql-fresh-debian}"
cache="${FRESH_CACHE:-overlay}"
host_target="${CARGO_TARGET_DIR:-$HOME/.cache/calibsql/target}"
work="$(mktemp -d /tmp/calibsql-fresh-XXXXXX)"

if [ "$(id -u)" -ne 0 ]; then
  echo "tests/fresh-debian.sh: needs root (debootstrap, chroot, mount)" >&2
  exit 1
fi
command -v debootstrap >/dev/null 2>&1 || apt-get install -y -qq debootstrap >/dev/null
if [ ! -x "$root/usr/bin/python3" ]; then
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
  chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    git ca-certificates python3 >/dev/null
  chroot "$root" update-ca-certificates >/dev/null
fi

mounts=()
mount_at() { # mount_at TARGET ARGS...: mounts, and remembers TARGET for the clean-up
  mkdir -p "$1"
  local target="$1"
  shift
  mount "$@" "$target"
  mounts=("$target" "${mounts[@]}")
}
cleanup() {
  for m in "${mounts[@]}"; do umount -l "$m" || true; done
  rm -rf "$work"
}
trap cleanup EXIT

mount_at "$root/proc" -t proc proc
mount_at "$root/sys" --rbind /sys
mount_at "$root/dev" --rbind /dev
mount_at "$root/root/.cargo" --bind "$HOME/.cargo"
mount_at "$root/root/.rustup" --bind "$HOME/.rustup"
mount_at "$root/src" --bind -o ro "$repo"
rm -rf "$root/root/.cache/calibsql/target"
if [ "$cache" = overlay ]; then
  mkdir -p "$work/upper" "$work/overlay-work"
  mount_at "$root/root/.cache/calibsql/target" -t overlay overlay \
    -o "lowerdir=$host_target,upperdir=$work/upper,workdir=$work/overlay-work"
fi

ca=/etc/ssl/certs/ca-certificates.crt
chroot "$root" env -i FRESH_COMMAND="${FRESH_COMMAND:-bash tests/run-all.sh}" HOME=/root LANG=C.UTF-8 TERM=dumb \
  PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  SSL_CERT_FILE=$ca PIP_CERT=$ca REQUESTS_CA_BUNDLE=$ca CURL_CA_BUNDLE=$ca \
  NODE_EXTRA_CA_CERTS=$ca AWS_CA_BUNDLE=$ca CARGO_TARGET_DIR=/root/.cache/calibsql/target \
  bash -c 'set -e
    rm -rf /root/calibsql /root/.cache/calibsql/venv /root/.cache/calibsql/gen-venv
    git clone -q /src /root/calibsql
    cd /root/calibsql
    echo "== fresh Debian: $(git log --oneline -1)"
    for c in cc psql javac chromium node; do command -v $c >/dev/null || echo "   no $c yet"; done
    time bash -c "$FRESH_COMMAND"'
