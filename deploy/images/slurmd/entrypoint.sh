#!/bin/sh
# Entrypoint of the slurmd pod: keep the mounted key out of job processes' reach, set up
# authentication from it, then run slurmd in the foreground for the Slurm node this pod stands
# for. The bridge sets the environment (the key's file with it); a pool's pod template may opt
# into auth/slurm and a mounted slurm.conf (see README.md next to this file).
set -eu
: "${SLURM_NODENAME:?the bridge sets SLURM_NODENAME to the Slurm node name}"
conf_file=${SLURM_CONF_FILE:-}
if [ -z "$conf_file" ]; then
  : "${SLURM_CONF_SERVER:?the bridge sets SLURM_CONF_SERVER to slurmctld host:port (configless)}"
fi
# The bridge mounts the key below this directory, which only root may enter: job processes run in
# this container, and a Secret's files are group-readable by the pod's fsGroup.
keys_dir=/etc/slurm-k8s-bridge/keys

# The key file: $1 (the bridge's variable) if set, else the bridge's path if there, else the path
# of bridges before the keys moved below $keys_dir.
key_file() {
  if [ -n "$1" ]; then echo "$1"; elif [ -e "$2" ]; then echo "$2"; else echo "$3"; fi
}

# Make the directory that guards key file $1 root:root 0700, before munged or slurmd start. Below
# $keys_dir it is $keys_dir itself (an image of one's own may lack it, and a runtime creates a
# mount point's missing parents 0755). Elsewhere it is the key's own directory if it holds nothing
# else (a file mounted on its own); a volume's root (read-only: the old /etc/munge-secret) or a
# directory shared with other files is left as it is, with a warning.
guard_key() {
  [ -e "$1" ] || return 0  # nothing to guard; using it fails, naming it
  case $1 in
    "$keys_dir"/*) dir=$keys_dir ;;
    *)
      dir=$(dirname "$1")
      if mountpoint -q "$dir" || [ "$(ls -A "$dir")" != "$(basename "$1")" ]; then
        echo "slurmd-entrypoint: warning: job processes can read the key $1: its directory" \
          "$dir is a volume's root or holds other files and cannot be made root-only. Mount" \
          "the key's volume below $keys_dir (the slurmd container's volumeMounts mountPath," \
          "e.g. $keys_dir/munge) and name the file in MUNGE_KEY_FILE or SLURM_KEY_FILE, as" \
          "the bridge does" >&2
        return 0
      fi ;;
  esac
  # Permission bits only: a setgid or sticky bit lets nobody in.
  mode=$(stat -c %a "$dir")
  if [ "$(stat -c %u:%g "$dir") ${mode#"${mode%???}"}" = "0:0 700" ]; then return 0; fi
  if ! { chown root:root "$dir" && chmod 0700 "$dir"; } 2>/dev/null; then
    echo "slurmd-entrypoint: cannot make $dir root-only (root:root 0700; it is" \
      "$(stat -c '%U:%G %a' "$dir")): job processes could read the key $1 below it. With a" \
      "read-only root file system the image must have it so already" >&2
    exit 1
  fi
}

slurm_key_src=$(key_file "${SLURM_KEY_FILE:-}" "$keys_dir/slurm/slurm.key" \
  /etc/slurm-secret/slurm.key)
if [ -e "$slurm_key_src" ]; then
  guard_key "$slurm_key_src"
  # auth/slurm (24.11+): slurmd reads the shared key itself; no munged. SLURM_SACK_KEY names the
  # key wherever slurm.conf lives (default: slurm.key beside it). Slurm refuses a key that others
  # may read, and the Secret's file is a symlink whose mode the pool decides: copy it.
  install -d -m 0755 /etc/slurm
  install -o root -g root -m 0400 "$slurm_key_src" /etc/slurm/slurm.key
  export SLURM_SACK_KEY=/etc/slurm/slurm.key
  auth="auth/slurm key=$slurm_key_src"
else
  key_src=$(key_file "${MUNGE_KEY_FILE:-}" "$keys_dir/munge/munge.key" \
    /etc/munge-secret/munge.key)
  guard_key "$key_src"
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
