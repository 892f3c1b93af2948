#!/usr/bin/env bash
# Makes sure `haproxy` is on PATH (Debian's `haproxy` package), for the L4 baseline of `make bench`.
# Idempotent: a no-op when haproxy is already there.
#
# The bench starts its own haproxy, in the foreground, with its own config on loopback. The package's
# maintainer scripts would enable and start the Debian service (listening on whatever
# /etc/haproxy/haproxy.cfg says). This script keeps them from starting it (a policy-rc.d that denies
# every start, for the time of the install), stops and disables the service if it started anyway, and
# ends any haproxy process that appeared during the install, by pid, never by name.
set -euo pipefail

if command -v haproxy >/dev/null 2>&1; then
    haproxy -v 2>&1 | head -n 1
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_haproxy.sh: haproxy is missing and apt-get is not available; install HAProxy >= 2.x" >&2
    echo "some other way and put it on PATH." >&2
    exit 1
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo)
    else
        echo "ensure_haproxy.sh: must run as root (or with sudo available) to apt-get install haproxy" >&2
        exit 1
    fi
fi

# pids of the processes named "haproxy" now (read from /proc: procps may not be installed).
haproxy_pids() {
    local d comm
    for d in /proc/[0-9]*; do
        comm=$(cat "$d/comm" 2>/dev/null) || continue
        [[ $comm == haproxy ]] && echo "${d#/proc/}"
    done
    return 0
}

before_pids=" $(haproxy_pids | tr '\n' ' ') "

# Deny service starts during the install. An existing policy-rc.d (Docker images ship one) is put back after.
POLICY=/usr/sbin/policy-rc.d
policy_backup=""
restore_policy() {
    if [[ -n $policy_backup ]]; then
        "${SUDO[@]}" mv -f "$policy_backup" "$POLICY"
    else
        "${SUDO[@]}" rm -f "$POLICY"
    fi
}
if [[ -e $POLICY ]]; then
    policy_backup=$(mktemp /usr/sbin/policy-rc.d.ensure-haproxy.XXXXXX 2>/dev/null || mktemp)
    "${SUDO[@]}" cp -p "$POLICY" "$policy_backup"
fi
trap restore_policy EXIT
printf '#!/bin/sh\n# written by quotagate scripts/ensure_haproxy.sh for the time of an install\nexit 101\n' |
    "${SUDO[@]}" tee "$POLICY" >/dev/null
"${SUDO[@]}" chmod 755 "$POLICY"

install_cmd=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold haproxy)

echo "ensure_haproxy.sh: installing Debian package haproxy" >&2
if ! "${install_cmd[@]}"; then
    echo "ensure_haproxy.sh: install failed; running apt-get update and trying again" >&2
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    "${install_cmd[@]}"
fi

restore_policy
trap - EXIT

# If the service started anyway (a host with systemd and another policy), stop and disable it: only the
# binary is wanted. There may be no systemd at all (containers), hence every path is best effort.
if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
    "${SUDO[@]}" systemctl stop haproxy >/dev/null 2>&1 || true
    "${SUDO[@]}" systemctl disable haproxy >/dev/null 2>&1 || true
fi
if command -v service >/dev/null 2>&1; then
    "${SUDO[@]}" service haproxy stop >/dev/null 2>&1 || true
fi
if command -v deb-systemd-helper >/dev/null 2>&1; then
    "${SUDO[@]}" deb-systemd-helper disable haproxy.service >/dev/null 2>&1 || true
fi
if command -v update-rc.d >/dev/null 2>&1; then
    "${SUDO[@]}" update-rc.d haproxy disable >/dev/null 2>&1 || true
fi

# End any haproxy process that appeared during the install (only those: by pid, not by name).
new_pids=()
for pid in $(haproxy_pids); do
    [[ $before_pids == *" $pid "* ]] || new_pids+=("$pid")
done
if ((${#new_pids[@]})); then
    echo "ensure_haproxy.sh: stopping haproxy started by the install: ${new_pids[*]}" >&2
    "${SUDO[@]}" kill "${new_pids[@]}" 2>/dev/null || true
    for _ in $(seq 50); do
        alive=()
        for pid in "${new_pids[@]}"; do [[ -d /proc/$pid ]] && alive+=("$pid"); done
        ((${#alive[@]})) || break
        sleep 0.1
    done
    for pid in "${new_pids[@]}"; do
        if [[ -d /proc/$pid ]]; then "${SUDO[@]}" kill -9 "$pid" 2>/dev/null || true; fi
    done
fi

hash -r
if ! command -v haproxy >/dev/null 2>&1; then
    echo "ensure_haproxy.sh: the haproxy package installed but haproxy is not on PATH" >&2
    exit 1
fi
haproxy -v 2>&1 | head -n 1
