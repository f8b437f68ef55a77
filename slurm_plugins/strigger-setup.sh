#!/bin/sh
# Register (or remove) permanent strigger node triggers that run node_event, so the bridge hears
# about DOWN / DRAINED / FAILING / UP nodes at once instead of at its next periodic Slurm poll.
#
# Usage: strigger-setup.sh [--nodes HOSTLIST] [--program PATH] [--clear] [--dry-run]
#   --nodes    only these nodes (default: every node; the bridge ignores nodes of no pool)
#   --program  the node-event hook to run (default: node_event beside this script in a checkout,
#              else slurm-k8s-bridge-node-event on PATH, the entry point pip installs)
#   --clear    remove the triggers this script registered (those running our node_event)
#   --dry-run  print the strigger commands instead of running them
#
# strigger only accepts triggers from SlurmUser (or root when SlurmUser is root), and slurmctld
# runs the program as that user on the slurmctld host: run this as SlurmUser, for example
#   sudo -u slurm ./strigger-setup.sh
# It is idempotent: triggers already registered for our node_event are left alone.
set -eu

here=$(cd -P -- "$(dirname -- "$0")" && pwd -P)
program=""
nodes=""
clear=0
dry=""
while [ $# -gt 0 ]; do
    case $1 in
        --nodes) nodes=${2:?--nodes needs a hostlist}; shift 2 ;;
        --nodes=*) nodes=${1#--nodes=}; shift ;;
        --program) program=${2:?--program needs a path}; shift 2 ;;
        --program=*) program=${1#--program=}; shift ;;
        --clear) clear=1; shift ;;
        --dry-run) dry=echo; shift ;;
        -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "strigger-setup.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done

if [ -z "$program" ]; then
    if [ -x "$here/node_event" ]; then
        program=$here/node_event
    else
        program=$(command -v slurm-k8s-bridge-node-event || true)
        [ -n "$program" ] || {
            echo "strigger-setup.sh: no node_event beside this script and no slurm-k8s-bridge-node-event on PATH; give --program" >&2
            exit 1
        }
    fi
fi
# slurmctld runs the program with no PATH lookup of ours: register an absolute path.
case $program in /*) ;; *) program=$(cd -P -- "$(dirname -- "$program")" && pwd -P)/$(basename -- "$program") ;; esac
[ -x "$program" ] || { echo "strigger-setup.sh: $program is not executable" >&2; exit 1; }
command -v strigger >/dev/null || { echo "strigger-setup.sh: strigger not on PATH" >&2; exit 1; }

# Columns: TRIG_ID RES_TYPE RES_ID TYPE OFFSET USER FLAGS PROGRAM...
existing=$(strigger --get --node --noheader 2>/dev/null || true)
ours=$(printf '%s\n' "$existing" | grep -F " $program " || true)

if [ "$clear" = 1 ]; then
    printf '%s\n' "$ours" | while read -r id _rest; do
        [ -n "$id" ] || continue
        $dry strigger --clear --id="$id"
        echo "cleared trigger $id"
    done
    exit 0
fi

node_opt=--node
[ -z "$nodes" ] || node_opt=--node=$nodes
# strigger option : the event name node_event forwards
for pair in down:down drained:drain fail:fail up:up; do
    option=${pair%%:*}
    kind=${pair#*:}
    if printf '%s\n' "$ours" | grep -q -- " $program $kind\$"; then
        echo "trigger for --$option already set"
        continue
    fi
    # strigger appends the hostlist to the program's arguments.
    $dry strigger --set "$node_opt" "--$option" --flags=PERM "--program=$program $kind"
    echo "set trigger for --$option -> $program $kind <hostlist>"
done
