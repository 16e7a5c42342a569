#!/usr/bin/env bash
# Docker Engine for the docker backend's tests, with gVisor's runsc as the
# runtime "runsc".
#
#   docker.sh [start]   install docker.io if needed, register runsc (built
#                       by runsc.sh) in /etc/docker/daemon.json, start
#                       dockerd unless one answers, and check that
#                       `docker run` works on both runtimes (runc, runsc)
#                       with an image imported from a tiny root file system
#   docker.sh stop      stop the dockerd that start started
#
# State lives in $AIRLOCK_CI_CACHE/docker: dockerd.log, dockerd.pid.
# The docker backend runs containers with --network=none, so the dockerd
# started here makes no bridge and no iptables rules on the host. It
# remaps user namespaces (--userns-remap=default: dockerd creates the user
# dockremap and its ranges in /etc/subuid and /etc/subgid), which the
# backend requires for runc, so that no container process runs as a host
# account. $AIRLOCK_DOCKERD_ARGS (default "--bridge=none --iptables=false
# --userns-remap=default") changes the flags. Progress goes to stderr,
# one line a step.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${AIRLOCK_CI_CACHE:-/var/cache/airlock-ci}
state=$cache/docker
pidfile=$state/dockerd.pid
logfile=$state/dockerd.log
config=/etc/docker/daemon.json
probe_image=airlock-ci/busybox:latest
wait_seconds=${AIRLOCK_DOCKER_WAIT:-60}
dockerd_args=${AIRLOCK_DOCKERD_ARGS:---bridge=none --iptables=false --userns-remap=default}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

step() { echo "docker: $*" >&2; }
fail() { echo "docker: error: $*" >&2; exit 1; }

# Debian's client, which matches Debian's daemon; another client may come
# first in PATH.
docker_cli() {
	if [ -x /usr/bin/docker ]; then /usr/bin/docker "$@"; else docker "$@"; fi
}

ours_running() {
	[ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

install_docker() {
	command -v dockerd >/dev/null && [ -x /usr/bin/docker ] && return
	step "installing docker.io"
	{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker.io; } \
		> "$work/apt.log" 2>&1 || { cat "$work/apt.log" >&2; fail "apt-get install docker.io failed"; }
}

# register_runsc adds the runtime to daemon.json, keeping every other key.
# runsc gets --oci-seccomp so that it applies the seccomp profile of each
# container (airlock's) inside the sandbox; without it, runsc ignores it.
register_runsc() {
	local runsc=$1 current='{}' merged
	mkdir -p "$(dirname "$config")"
	[ -s "$config" ] && current=$(cat "$config")
	merged=$(jq --arg path "$runsc" '.runtimes.runsc.path = $path | .runtimes.runsc.runtimeArgs = ["--oci-seccomp"]' <<< "$current") ||
		fail "$config is not valid JSON"
	if [ "$merged" != "$(jq . <<< "$current")" ]; then
		step "registering $runsc as runtime runsc in $config"
		printf '%s\n' "$merged" > "$config.new"
		mv "$config.new" "$config"
		if docker_cli info >/dev/null 2>&1; then
			ours_running || fail "a dockerd we did not start is running; restart it to load $config"
			step "reloading our dockerd"
			kill -HUP "$(cat "$pidfile")"
		fi
	fi
}

# remapped tells whether the running daemon remaps user namespaces.
remapped() {
	docker_cli info --format '{{json .SecurityOptions}}' 2>/dev/null | grep -q 'name=userns'
}

start_dockerd() {
	if docker_cli info >/dev/null 2>&1; then
		case " $dockerd_args " in
		*" --userns-remap="*)
			if ! remapped; then
				ours_running || fail "a dockerd we did not start runs without --userns-remap; restart it with --userns-remap=default"
				step "our dockerd runs without --userns-remap: restarting it"
				stop
			fi
			;;
		esac
	fi
	if docker_cli info >/dev/null 2>&1; then
		step "dockerd is running"
		return
	fi
	mkdir -p "$state"
	step "starting dockerd (log: $logfile)"
	# shellcheck disable=SC2086 # the extra arguments are words
	setsid dockerd --config-file "$config" $dockerd_args >> "$logfile" 2>&1 < /dev/null &
	echo $! > "$pidfile"
	local waited=0
	until docker_cli info >/dev/null 2>&1; do
		if ! ours_running; then
			tail -n 30 "$logfile" >&2
			fail "dockerd exited while starting"
		fi
		if [ "$waited" -ge "$wait_seconds" ]; then
			tail -n 30 "$logfile" >&2
			fail "dockerd did not answer within ${wait_seconds}s"
		fi
		sleep 1
		waited=$((waited + 1))
	done
}

# probe imports a root file system holding only a static busybox from
# Debian's busybox-static (there is no registry) and runs it under runsc.
probe() {
	local out nl='
'

	if ! docker_cli image inspect "$probe_image" >/dev/null 2>&1; then
		step "importing $probe_image from busybox-static"
		(cd "$work" && apt-get download -q busybox-static > apt.log 2>&1) ||
			{ cat "$work/apt.log" >&2; fail "apt-get download busybox-static failed"; }
		dpkg-deb -x "$work"/busybox-static_*.deb "$work/deb"
		mkdir -p "$work/rootfs/bin" "$work/rootfs/tmp" "$work/rootfs/proc" "$work/rootfs/dev" "$work/rootfs/sys" "$work/rootfs/etc"
		find "$work/deb" -name busybox -type f -exec install -m 0755 {} "$work/rootfs/bin/busybox" \;
		[ -x "$work/rootfs/bin/busybox" ] || fail "busybox-static has no busybox binary"
		tar -C "$work/rootfs" -c . | docker_cli import - "$probe_image" > /dev/null
	fi
	step "running $probe_image with --runtime=runsc"
	# dmesg shows gVisor's banner; the default seccomp profile (applied inside
	# gVisor with --oci-seccomp) refuses syslog, so this one container runs
	# without it.
	out=$(docker_cli run --rm --runtime=runsc --network=none --security-opt seccomp=unconfined "$probe_image" \
		/bin/busybox sh -c 'echo hello from $(busybox uname -s); busybox dmesg | busybox head -n 1' 2>&1) ||
		fail "docker run --runtime=runsc failed: $out"
	case $out in
	*"hello from Linux"*gVisor*) ;;
	*) fail "the container did not run under gVisor: $out" ;;
	esac
	# the imported image's files are its root's inside, under runc's
	# remapped user namespace too
	step "running $probe_image with --runtime=runc"
	out=$(docker_cli run --rm --runtime=runc --network=none --user 1000:1000 "$probe_image" \
		/bin/busybox sh -c 'busybox stat -c %u /bin/busybox; busybox id -u' 2>&1) ||
		fail "docker run --runtime=runc failed: $out"
	[ "$out" = "0${nl}1000" ] || fail "the imported image under runc: $out, want its files owned by 0 and the user 1000"
	if remapped; then
		step "the daemon remaps user namespaces: $(grep '^dockremap:' /etc/subuid || echo 'no dockremap range in /etc/subuid')"
	fi
}

stop() {
	if ! ours_running; then
		rm -f "$pidfile"
		step "no dockerd of ours is running"
		return
	fi
	local pid waited=0
	pid=$(cat "$pidfile")
	step "stopping dockerd ($pid)"
	kill -TERM "$pid"
	while kill -0 "$pid" 2>/dev/null; do
		if [ "$waited" -ge 30 ]; then
			kill -KILL "$pid" 2>/dev/null || true
			break
		fi
		sleep 1
		waited=$((waited + 1))
	done
	rm -f "$pidfile"
	# dockerd leaves a network namespace mounted and its state folders.
	local m
	for m in $(awk '$5 ~ "^/run/docker/" { print $5 }' /proc/self/mountinfo | sort -r); do
		umount "$m"
	done
	rm -rf /run/docker /run/containerd
}

case ${1:-start} in
start)
	install_docker
	runsc=$(bash "$here/runsc.sh")
	register_runsc "$runsc"
	start_dockerd
	probe
	step "ready"
	;;
stop) stop ;;
*) fail "usage: docker.sh [start|stop]" ;;
esac
