#!/usr/bin/env bash
# The Debian package, built and installed as an operator would: `cargo deb` (cargo-deb 3.8.0,
# installed into the target dir once), then `dpkg -i`. Checks the service user, the installed
# paths and their modes, `systemd-analyze verify` of the unit, then runs the installed binary as
# the service user with the packaged settings: it serves, records and replays, and refuses to
# start when its data dir is not writable. Installs into the system, so it runs only as root
# with TAPEDECK_ROOT_TESTS=1 (as CI does); it removes the package after.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ] || [ "${TAPEDECK_ROOT_TESTS:-}" != 1 ]; then
    echo "package-test: SKIPPED: it installs a package; run it as root with TAPEDECK_ROOT_TESTS=1 (CI does)" >&2
    exit 0
fi
target="${CARGO_TARGET_DIR:-target}"
tools="$target/cargo-deb"
if ! "$tools/bin/cargo-deb" --version 2>/dev/null | grep -q '3\.8\.0'; then
    echo "package-test: installing cargo-deb 3.8.0 into $tools" >&2
    cargo install -q cargo-deb --version 3.8.0 --locked --root "$tools"
fi
fail() { echo "package-test: FAILED: $*" >&2; exit 1; }

# Built with the release profile, as the README's run command builds it.
deb=$(PATH="$tools/bin:$PATH" cargo deb -q --output "$target/debian/" | tail -n 1)
[ -f "$deb" ] || fail "cargo deb made no package ($deb)"
state=/var/lib/tapedeck
made_state=no
[ -e "$state" ] || made_state=yes
server=
cleanup() {
    [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
    dpkg --purge tapedeck >/dev/null 2>&1 || true
    if [ "$made_state" = yes ]; then rm -rf "$state"; userdel tapedeck 2>/dev/null || true; fi
}
trap cleanup EXIT
dpkg -i "$deb" >/dev/null

# The service user: a system account with no shell and no login.
entry=$(getent passwd tapedeck) || fail "no tapedeck user"
uid=$(echo "$entry" | cut -d: -f3)
[ "$uid" -lt 1000 ] || fail "tapedeck is not a system user (uid $uid)"
[ "$(echo "$entry" | cut -d: -f7)" = /usr/sbin/nologin ] || fail "tapedeck has a shell: $entry"
# What is installed, owned by root, and who may read it (the settings may hold secrets).
check_mode() {
    local got
    got=$(stat -c '%a %U:%G' "$1") || fail "$1 is not installed"
    [ "$got" = "$2" ] || fail "$1 is $got, not $2"
}
check_mode /usr/bin/tapedeck "755 root:root"
check_mode /lib/systemd/system/tapedeck.service "644 root:root"
check_mode /etc/default/tapedeck "600 root:root"
check_mode /usr/share/tapedeck/grafana/tapedeck.json "644 root:root"
dpkg-query -W -f='${Conffiles}' tapedeck | grep -q /etc/default/tapedeck \
    || fail "/etc/default/tapedeck is not a conffile (an upgrade would overwrite its edits)"
for setting in User=tapedeck StateDirectory=tapedeck LimitNOFILE=1048576 NoNewPrivileges=yes \
    ProtectSystem=strict ProtectHome=yes PrivateTmp=yes EnvironmentFile=-/etc/default/tapedeck; do
    grep -qx "$setting" /lib/systemd/system/tapedeck.service || fail "the unit lacks $setting"
done
if command -v systemd-analyze >/dev/null; then
    verified=$(systemd-analyze verify /lib/systemd/system/tapedeck.service 2>&1) \
        || fail "systemd-analyze verify: $verified"
    [ -z "$verified" ] || fail "systemd-analyze verify says: $verified"
fi

# The installed binary as the service user, with the packaged settings (as systemd runs it:
# its StateDirectory made and owned by the user), on free ports.
install -d -o tapedeck -g tapedeck -m 0750 "$state"
log=$(mktemp)
(
    set -a
    . /etc/default/tapedeck
    set +a
    # setpriv executes the server itself (runuser would stay its parent, and end it on its own
    # terms): SIGTERM reaches tapedeck, and its exit status is tapedeck's.
    exec setpriv --reuid=tapedeck --regid=tapedeck --init-groups -- \
        env TAPEDECK_LISTEN=127.0.0.1:0 TAPEDECK_HTTP_LISTEN=127.0.0.1:0 /usr/bin/tapedeck serve
) 2>"$log" &
server=$!
addr=
for _ in $(seq 100); do
    addr=$(grep 'tapedeck listening' "$log" | grep -o '"addr":"[^"]*"' | head -n 1 | cut -d'"' -f4 || true)
    [ -n "$addr" ] && break
    kill -0 "$server" 2>/dev/null || fail "the service exited: $(cat "$log")"
    sleep 0.1
done
[ -n "$addr" ] || fail "the service did not listen within 10 s: $(cat "$log")"
[ "$(stat -c '%U' "$state/tapedeck.redb")" = tapedeck ] || fail "the database is not the service user's"
echo "one packaged recording" | runuser -u tapedeck -- /usr/bin/tapedeck record pkg-test --server "$addr" >/dev/null
replayed=$(runuser -u tapedeck -- /usr/bin/tapedeck replay pkg-test --server "$addr")
[ "$replayed" = "one packaged recording" ] || fail "replayed '$replayed'"
kill -TERM "$server"
wait "$server" || fail "the service did not stop cleanly on SIGTERM: $(tail -n 3 "$log")"
server=

# A data dir the service user may not write (root's, empty): refused at once, in one line
# that names it.
readonly_dir=$(mktemp -d)
chmod 0755 "$readonly_dir"
set +e
refused=$(set -a; . /etc/default/tapedeck; set +a
    setpriv --reuid=tapedeck --regid=tapedeck --init-groups -- \
        env TAPEDECK_LISTEN=127.0.0.1:0 TAPEDECK_HTTP_LISTEN=off TAPEDECK_DATA_DIR="$readonly_dir" \
        timeout 10 /usr/bin/tapedeck serve 2>&1 >/dev/null)
status=$?
set -e
rm -rf "$readonly_dir"
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || fail "it started on a data dir it cannot write (status $status)"
echo "$refused" | grep -q "$readonly_dir" || fail "the refusal does not name the data dir: $refused"
echo "package-test: ok ($deb)"
