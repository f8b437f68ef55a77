#!/bin/sh
# Entrypoint of the slurmd pod: start munged with the key from the Kubernetes Secret, then run slurmd
# in the foreground for the Slurm node this pod stands for. The bridge sets the environment.
set -eu
: "${SLURM_NODENAME:?the bridge sets SLURM_NODENAME to the Slurm node name}"
: "${SLURM_CONF_SERVER:?the bridge sets SLURM_CONF_SERVER to slurmctld host:port (configless)}"
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

mkdir -p /var/spool/slurmd /run/slurm
echo "slurmd-entrypoint: node=$SLURM_NODENAME conf-server=$SLURM_CONF_SERVER munge=$socket" >&2
# -b: report a fresh boot, else slurmctld waits for a "reboot" of a powered-up cloud node.
# shellcheck disable=SC2086  # SLURMD_EXTRA_ARGS is a word list on purpose
exec /usr/sbin/slurmd -D -b -N "$SLURM_NODENAME" --conf-server "$SLURM_CONF_SERVER" ${SLURMD_EXTRA_ARGS:-}
