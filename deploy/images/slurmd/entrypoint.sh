#!/bin/sh
# Entrypoint of the slurmd pod: set up authentication from the mounted Secret, then run slurmd in the
# foreground for the Slurm node this pod stands for. The bridge sets the environment; the pool's pod
# template opts into auth/slurm and a mounted slurm.conf (see README.md next to this file).
set -eu
: "${SLURM_NODENAME:?the bridge sets SLURM_NODENAME to the Slurm node name}"
conf_file=${SLURM_CONF_FILE:-}
if [ -z "$conf_file" ]; then
  : "${SLURM_CONF_SERVER:?the bridge sets SLURM_CONF_SERVER to slurmctld host:port (configless)}"
fi
slurm_key_src=${SLURM_KEY_FILE:-/etc/slurm-secret/slurm.key}

if [ -e "$slurm_key_src" ]; then
  # auth/slurm (24.11+): slurmd reads the shared key itself; no munged. SLURM_SACK_KEY names the
  # key wherever slurm.conf lives (default: slurm.key beside it). Slurm refuses a key that others
  # may read, and the Secret's file is a symlink whose mode the pool decides: copy it.
  install -d -m 0755 /etc/slurm
  install -o root -g root -m 0400 "$slurm_key_src" /etc/slurm/slurm.key
  export SLURM_SACK_KEY=/etc/slurm/slurm.key
  auth="auth/slurm key=$slurm_key_src"
else
  key_src=${MUNGE_KEY_FILE:-/etc/munge-secret/munge.key}
  socket=${MUNGE_SOCKET:-/run/munge/munge.socket.2}
  install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
  install -d -o munge -g munge -m 0755 /run/munge
  install -o munge -g munge -m 0400 "$key_src" /etc/munge/munge.key
  runuser -u munge -- /usr/sbin/munged --key-file=/etc/munge/munge.key
  # Before it has fetched slurm.conf, slurmd talks to munge's default socket; after, to AuthInfo's.
  if [ "$socket" != /run/munge/munge.socket.2 ]; then
    mkdir -p "$(dirname "$socket")"
    ln -sf /run/munge/munge.socket.2 "$socket"
  fi
  auth="munge=$socket"
fi

mkdir -p /var/spool/slurmd /run/slurm
if [ -n "$conf_file" ]; then
  # A mounted slurm.conf (a ConfigMap): needed with auth/slurm, whose configless fetch fails.
  # Its other files (cgroup.conf, gres.conf ...) are read from the same directory.
  set -- -f "$conf_file"
  source="conf=$conf_file"
else
  set -- --conf-server "$SLURM_CONF_SERVER"
  source="conf-server=$SLURM_CONF_SERVER"
fi
# Job confinement (proctrack/cgroup, task/cgroup) on a cgroup v1 host: a privileged container
# gets read-write binds of its own cgroup at /sys/fs/cgroup/<controller>, but stays in the
# host's cgroup namespace, so /proc/<pid>/cgroup names host paths that do not exist in here
# (slurmd cannot find a pid's job: `scontrol pidinfo`, stepd's pid lookups). A cgroup namespace
# of slurmd's own makes the two agree. Not on cgroup v2, whose plugin checks the mounts against
# the namespace (see README.md); SLURMD_CGROUPNS=no turns it off.
cgroupns=
if [ "${SLURMD_CGROUPNS:-auto}" != no ] && [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = tmpfs ] \
    && unshare --cgroup true 2>/dev/null; then
  cgroupns="unshare --cgroup --"
fi
echo "slurmd-entrypoint: node=$SLURM_NODENAME $source $auth${cgroupns:+ cgroupns=own}" >&2
# -b: report a fresh boot, else slurmctld waits for a "reboot" of a powered-up cloud node.
# shellcheck disable=SC2086  # SLURMD_EXTRA_ARGS is a word list on purpose; cgroupns a prefix
exec $cgroupns /usr/sbin/slurmd -D -b -N "$SLURM_NODENAME" "$@" ${SLURMD_EXTRA_ARGS:-}
