#!/bin/sh
# Entrypoint of the bridge image. One image, several roles (one per container, or all in one):
#   munged     munged in the foreground with the key at $MUNGE_KEY_FILE (a mounted Secret)
#   slurmctld  slurmctld in the foreground; slurm.conf = $SLURM_CONF_HEAD (the site's lines)
#              followed by what `slurm-k8s-bridge render-slurm-conf` makes of the bridge's
#              configuration, so Slurm's nodes and the bridge's pods cannot disagree
#   bridge     slurm-k8s-bridge serve --config $SKB_CONFIG (writes slurm.conf first if absent:
#              the bridge's scontrol calls need it); the only role that needs Kubernetes
#              credentials, so give them to its container alone
#   controller munged in the background, slurmctld in front: slurmctld's container when the
#              bridge runs in a container of its own sharing the munge socket's and the bridge
#              socket's directories (docker-compose.yml)
#   slurm-conf only write slurm.conf (an initContainer, so that all containers find it)
#   all        munged and the bridge in the background, slurmctld in front: one container,
#              so slurmctld's container holds the bridge's credentials too (prefer the above)
# Anything else runs as a command (e.g. `sh`).
set -eu
role=${1:-all}
[ $# -gt 0 ] && shift

config=${SKB_CONFIG:-/etc/slurm-k8s-bridge/bridge.yaml}
head=${SLURM_CONF_HEAD:-/etc/slurm-k8s-bridge/slurm.conf.head}
conf=${SLURM_CONF:-/etc/slurm/slurm.conf}
plugins=/opt/slurm-k8s-bridge/slurm_plugins
munge_socket=${MUNGE_SOCKET:-/run/munge/munge.socket.2}
bridge_socket=${SKB_BRIDGE_SOCKET:-/run/slurm-k8s-bridge/bridge.sock}
export SLURM_CONF="$conf"

write_slurm_conf() {
    mkdir -p "$(dirname "$conf")" /var/spool/slurmctld /var/log/slurm /run/slurm
    # The installed Slurm's series (e.g. 22.05), whose CLOUD nodes need PrivateData=cloud.
    series=$(/usr/sbin/slurmctld -V | awk '{print $2}' | cut -d. -f1,2)
    version_args=
    [ "$series" = 22.05 ] && version_args=--private-data-cloud
    /usr/local/bin/slurm-k8s-bridge check-config --config "$config" >&2
    {
        # @HOSTNAME@: for deployments whose hostname is not known in advance (host network).
        sed "s/@HOSTNAME@/$(uname -n | cut -d. -f1)/g" "$head"
        echo
        # Rendered before slurmctld runs, so its version and the site's SlurmctldParameters
        # (those of $SLURM_CONF_HEAD, $SKB_SLURMCTLD_PARAMETERS) are given, not read from it.
        # This slurm.conf is generated whole at every start, so the render writes the list
        # globals too (an Include into a site's own slurm.conf must not: --write-list-globals).
        # $SKB_RENDER_ARGS: further render-slurm-conf options (word-split).
        # shellcheck disable=SC2086
        /usr/local/bin/slurm-k8s-bridge render-slurm-conf --config "$config" \
            --hooks-dir "$plugins" --suspend-time "${SKB_SUSPEND_TIME:-300}" \
            --suspend-timeout "${SKB_SUSPEND_TIMEOUT:-30}" \
            --resume-timeout "${SKB_RESUME_TIMEOUT:-600}" \
            --slurm-version "$series" --write-list-globals \
            --slurmctld-parameters "${SKB_SLURMCTLD_PARAMETERS-}" \
            --config-overrides --resume-rate 0 --suspend-rate 0 --tree-width 65533 \
            $version_args ${SKB_RENDER_ARGS-}
    } >"$conf.tmp"
    mv "$conf.tmp" "$conf"
}

wait_for() {
    i=0
    until [ -S "$1" ]; do
        i=$((i + 1))
        if [ $i -ge 120 ]; then echo "entrypoint: no socket at $1" >&2; exit 1; fi
        sleep 0.5
    done
}

key_src=${MUNGE_KEY_FILE:-/etc/munge-secret/munge.key}
prepare_munge() {
    install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
    install -d -o munge -g munge -m 0755 "$(dirname "$munge_socket")"
    # munged refuses a key that it does not own with mode 0400; a mounted Secret is root's.
    install -o munge -g munge -m 0400 "$key_src" /etc/munge/munge.key
}
munged_cmd="/usr/sbin/munged --foreground --force --socket=$munge_socket --key-file=/etc/munge/munge.key"

case $role in
munged)
    prepare_munge
    # setpriv execs munged itself (runuser would stay as root, its parent): the container's
    # PID 1 is munged, as the munge user.
    # shellcheck disable=SC2086  # a word list on purpose
    exec setpriv --reuid=munge --regid=munge --init-groups -- $munged_cmd
    ;;
slurm-conf)
    write_slurm_conf
    ;;
slurmctld)
    [ -f "$conf" ] || write_slurm_conf
    wait_for "$munge_socket"
    wait_for "$bridge_socket"
    echo "entrypoint: slurmctld with $conf" >&2
    exec /usr/sbin/slurmctld -D -i -f "$conf" "$@"
    ;;
bridge)
    [ -f "$conf" ] || write_slurm_conf
    mkdir -p "$(dirname "$bridge_socket")"
    exec /usr/local/bin/slurm-k8s-bridge serve --config "$config" "$@"
    ;;
controller)
    prepare_munge
    # shellcheck disable=SC2086
    runuser -u munge -- $munged_cmd &
    munged_pid=$!
    [ -f "$conf" ] || write_slurm_conf
    wait_for "$munge_socket"
    wait_for "$bridge_socket"
    echo "entrypoint: slurmctld with $conf" >&2
    # Stop munged with us: compose sends SIGTERM to this shell only.
    trap 'kill $slurmctld_pid 2>/dev/null; kill $munged_pid 2>/dev/null' TERM INT
    /usr/sbin/slurmctld -D -i -f "$conf" "$@" &
    slurmctld_pid=$!
    wait $slurmctld_pid
    ;;
all)
    prepare_munge
    # shellcheck disable=SC2086
    runuser -u munge -- $munged_cmd &
    mkdir -p "$(dirname "$bridge_socket")"
    /usr/local/bin/slurm-k8s-bridge serve --config "$config" &
    bridge_pid=$!
    write_slurm_conf
    wait_for "$munge_socket"
    wait_for "$bridge_socket"
    # Stop the background daemons with us: compose sends SIGTERM to this shell only.
    trap 'kill $bridge_pid 2>/dev/null; kill $slurmctld_pid 2>/dev/null' TERM INT
    /usr/sbin/slurmctld -D -i -f "$conf" "$@" &
    slurmctld_pid=$!
    wait $slurmctld_pid
    ;;
*)
    exec "$role" "$@"
    ;;
esac
