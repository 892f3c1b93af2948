#!/usr/bin/env bash
# Usage: ensure_debian_tools.sh PACKAGE COMMAND...
#
# Makes sure every COMMAND is on PATH, installing the Debian package PACKAGE if one is missing, and
# prints each command's version. Idempotent: a no-op (versions only) when all are there. Used for
# haproxy (the L4 baseline of `make bench`) and prometheus (promtool and prometheus, for the tests
# of ops/prometheus/).
#
# Only the binaries are wanted: the tests and the bench start their own processes on loopback with
# their own configs. The package's maintainer scripts would enable and start the Debian service, so
# this script keeps them from starting it (a policy-rc.d that denies every start, for the time of
# the install), stops and disables the service if it started anyway, and ends any process named
# PACKAGE that appeared during the install, by pid, never by name.
set -euo pipefail

if (($# < 2)); then
    echo "usage: $0 PACKAGE COMMAND..." >&2
    exit 2
fi
PACKAGE=$1
shift
COMMANDS=("$@")
ME=$(basename "$0")

have_tools() {
    local cmd
    for cmd in "${COMMANDS[@]}"; do command -v "$cmd" >/dev/null 2>&1 || return 1; done
}

print_versions() {
    local cmd
    for cmd in "${COMMANDS[@]}"; do "$cmd" --version 2>&1 | head -n 1 || true; done
}

if have_tools; then
    print_versions
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "$ME: ${COMMANDS[*]} missing and apt-get is not available; install $PACKAGE some other way" >&2
    echo "and put ${COMMANDS[*]} on PATH." >&2
    exit 1
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo)
    else
        echo "$ME: must run as root (or with sudo available) to apt-get install $PACKAGE" >&2
        exit 1
    fi
fi

# pids of the processes named PACKAGE now (read from /proc: procps may not be installed).
package_pids() {
    local d comm
    for d in /proc/[0-9]*; do
        comm=$(cat "$d/comm" 2>/dev/null) || continue
        [[ $comm == "$PACKAGE" ]] && echo "${d#/proc/}"
    done
    return 0
}

before_pids=" $(package_pids | tr '\n' ' ') "

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
    policy_backup=$(mktemp "/usr/sbin/policy-rc.d.ensure-$PACKAGE.XXXXXX" 2>/dev/null || mktemp)
    "${SUDO[@]}" cp -p "$POLICY" "$policy_backup"
fi
trap restore_policy EXIT
printf '#!/bin/sh\n# written by quotagate scripts/%s for the time of an install\nexit 101\n' "$ME" |
    "${SUDO[@]}" tee "$POLICY" >/dev/null
"${SUDO[@]}" chmod 755 "$POLICY"

install_cmd=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$PACKAGE")

echo "$ME: installing Debian package $PACKAGE" >&2
if ! "${install_cmd[@]}"; then
    echo "$ME: install failed; running apt-get update and trying again" >&2
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    "${install_cmd[@]}"
fi

restore_policy
trap - EXIT

# If the service started anyway (a host with systemd and another policy), stop it, then undo the
# boot-time enabling the postinst did. There may be no systemd at all (containers): best effort.
if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
    "${SUDO[@]}" systemctl stop "$PACKAGE" >/dev/null 2>&1 || true
    "${SUDO[@]}" systemctl disable "$PACKAGE" >/dev/null 2>&1 || true
fi
if command -v service >/dev/null 2>&1; then
    "${SUDO[@]}" service "$PACKAGE" stop >/dev/null 2>&1 || true
fi
if command -v deb-systemd-helper >/dev/null 2>&1; then
    "${SUDO[@]}" deb-systemd-helper disable "$PACKAGE.service" >/dev/null 2>&1 || true
fi
if command -v update-rc.d >/dev/null 2>&1; then
    "${SUDO[@]}" update-rc.d "$PACKAGE" disable >/dev/null 2>&1 || true
fi

# End any such process that appeared during the install (only those: by pid, not by name).
new_pids=()
for pid in $(package_pids); do
    [[ $before_pids == *" $pid "* ]] || new_pids+=("$pid")
done
if ((${#new_pids[@]})); then
    echo "$ME: stopping $PACKAGE started by the install: ${new_pids[*]}" >&2
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
if ! have_tools; then
    echo "$ME: the $PACKAGE package installed but ${COMMANDS[*]} are not all on PATH" >&2
    exit 1
fi
print_versions
