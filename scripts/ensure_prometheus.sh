#!/usr/bin/env bash
# Makes sure `promtool` and `prometheus` are on PATH (Debian's `prometheus` package), for the tests
# of ops/prometheus/. Idempotent: a no-op when both are already there.
#
# The package's maintainer scripts would enable and start the Debian service. This script keeps
# them from starting it (a policy-rc.d that denies every start, for the time of the install),
# stops the service if it started anyway, and ends any prometheus process that appeared during
# the install, by pid: the tests start their own Prometheus on loopback.
set -euo pipefail

have_tools() { command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; }

print_versions() {
    promtool --version 2>&1 | head -n 1 || true
    prometheus --version 2>&1 | head -n 1 || true
}

if have_tools; then
    print_versions
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_prometheus.sh: promtool/prometheus are missing and apt-get is not available;" >&2
    echo "install Prometheus 2.x (promtool and prometheus) some other way and put them on PATH." >&2
    exit 1
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo)
    else
        echo "ensure_prometheus.sh: must run as root (or with sudo available) to apt-get install prometheus" >&2
        exit 1
    fi
fi

# pids of the processes named "prometheus" now (read from /proc: procps may not be installed).
prometheus_pids() {
    local d comm
    for d in /proc/[0-9]*; do
        comm=$(cat "$d/comm" 2>/dev/null) || continue
        [[ $comm == prometheus ]] && echo "${d#/proc/}"
    done
    return 0
}

before_pids=" $(prometheus_pids | tr '\n' ' ') "

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
    policy_backup=$(mktemp /usr/sbin/policy-rc.d.ensure-prometheus.XXXXXX 2>/dev/null || mktemp)
    "${SUDO[@]}" cp -p "$POLICY" "$policy_backup"
fi
trap restore_policy EXIT
printf '#!/bin/sh\n# written by quotagate scripts/ensure_prometheus.sh for the time of an install\nexit 101\n' |
    "${SUDO[@]}" tee "$POLICY" >/dev/null
"${SUDO[@]}" chmod 755 "$POLICY"

export DEBIAN_FRONTEND=noninteractive
install_cmd=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold prometheus)

echo "ensure_prometheus.sh: installing Debian package prometheus" >&2
if ! "${install_cmd[@]}"; then
    echo "ensure_prometheus.sh: install failed; running apt-get update and trying again" >&2
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    "${install_cmd[@]}"
fi

restore_policy
trap - EXIT

# If the service started anyway (a host with systemd and another policy), stop it; there may be no systemd.
# Then undo the boot-time enabling the postinst did: only the tools are wanted, not a service.
if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
    "${SUDO[@]}" systemctl stop prometheus >/dev/null 2>&1 || true
    "${SUDO[@]}" systemctl disable prometheus >/dev/null 2>&1 || true
fi
if command -v service >/dev/null 2>&1; then
    "${SUDO[@]}" service prometheus stop >/dev/null 2>&1 || true
fi
if command -v deb-systemd-helper >/dev/null 2>&1; then
    "${SUDO[@]}" deb-systemd-helper disable prometheus.service >/dev/null 2>&1 || true
fi
if command -v update-rc.d >/dev/null 2>&1; then
    "${SUDO[@]}" update-rc.d prometheus disable >/dev/null 2>&1 || true
fi

# End any prometheus process that appeared during the install (only those: by pid, not by name).
new_pids=()
for pid in $(prometheus_pids); do
    [[ $before_pids == *" $pid "* ]] || new_pids+=("$pid")
done
if ((${#new_pids[@]})); then
    echo "ensure_prometheus.sh: stopping prometheus started by the install: ${new_pids[*]}" >&2
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
    echo "ensure_prometheus.sh: the prometheus package installed but promtool/prometheus are not on PATH" >&2
    exit 1
fi
print_versions
