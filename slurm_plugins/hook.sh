# Shared by resume, suspend, resume_fail, node_event and job_ready; sourced, never run on its own.
#
# slurmctld runs its hooks with no PATH (only PWD, SHLVL, SLURM_CONF, and SLURM_RESUME_FILE for
# a resume), so this uses shell builtins and absolute paths only. It finds:
#   settings   hooks.env next to the hook as invoked, else next to the real file (after
#              symlinks); only the SKB_* keys below are read, as KEY=value lines (no code runs)
#   client     <dir>/bin/skb-hook (the static Go client, `make hook-client`) unless
#              SKB_HOOK_CLIENT=python; it has bridge.hooks' contract and starts in milliseconds
#   Python     otherwise: SKB_PYTHON, else <repo>/.venv/bin/python, else /usr/bin/python3
# and then execs `skb-hook <kind> <args>` or `python -m bridge.hooks <kind> <args>`, which does
# the work.
# job_ready (PrologSlurmctld) calls no bridge: it waits in job_ready.sh, then exits 0.
# Expects: skb_kind (resume|suspend|resume_fail|node_event|job_ready), skb_self (the hook's real
# path, symlinks resolved), "$@" as slurmctld passed it.

skb_invoked=$0
case $skb_invoked in */*) ;; *) skb_invoked=./$skb_invoked ;; esac
skb_dir=$(cd -P -- "${skb_self%/*}" && pwd -P)
skb_repo=${skb_dir%/*}

skb_env=${skb_invoked%/*}/hooks.env
[ -r "$skb_env" ] || skb_env=$skb_dir/hooks.env
if [ -r "$skb_env" ]; then
    while IFS= read -r skb_line || [ -n "$skb_line" ]; do
        case $skb_line in
            SKB_HOOK_CLIENT=* | SKB_PYTHON=* | SKB_SOCKET=* | SKB_SLURM_BIN=* | SKB_HOOK_LOG=* | \
            SKB_TIMEOUT_S=* | SKB_TLS_CERT=* | SKB_TLS_KEY=* | SKB_TLS_CA=* | SKB_JOB_READY_MAX_S=* | \
            SKB_SLURM_CONF=*)
                skb_key=${skb_line%%=*}
                skb_value=${skb_line#*=}
                case $skb_value in
                    \"*\") skb_value=${skb_value#\"}; skb_value=${skb_value%\"} ;;
                    \'*\') skb_value=${skb_value#\'}; skb_value=${skb_value%\'} ;;
                esac
                export "$skb_key=$skb_value"
                ;;
        esac
    done <"$skb_env"
fi

if [ "$skb_kind" = job_ready ]; then
    . "$skb_dir/job_ready.sh"
fi

# The Go client first: no interpreter to start, so no Python check to pay for either.
case ${SKB_HOOK_CLIENT:-go} in
    go) if [ -x "$skb_dir/bin/skb-hook" ]; then exec "$skb_dir/bin/skb-hook" "$skb_kind" "$@"; fi ;;
esac

if [ -z "${SKB_PYTHON:-}" ]; then
    if [ -x "$skb_repo/.venv/bin/python" ]; then
        SKB_PYTHON=$skb_repo/.venv/bin/python
    else
        SKB_PYTHON=/usr/bin/python3
    fi
fi
# Running from a checkout: make its bridge package importable whatever the venv holds.
if [ -f "$skb_repo/bridge/hooks.py" ]; then
    PYTHONPATH=$skb_repo${PYTHONPATH:+:$PYTHONPATH}
    export PYTHONPATH
fi

# Without a working Python nothing reaches the bridge; a resume must still not leave jobs waiting
# for ResumeTimeout: log a line (SKB_HOOK_LOG and stderr, as bridge.hooks does) and, for a
# resume, set the nodes DOWN with the reason.
skb_broken() {
    skb_line="slurm-k8s-bridge-hook[$$] $skb_kind args='$skb_args' result=HookBroken"
    skb_line="$skb_line error='$2' python=$SKB_PYTHON"
    if [ "$skb_kind" = resume ] && [ -n "${1:-}" ]; then
        if "${SKB_SLURM_BIN:-/usr/bin}/scontrol" update "nodename=$1" state=down \
            "reason=k8s: HookBroken: $2"; then
            skb_line="$skb_line action=scontrol-state=down"
        else
            skb_line="$skb_line action='scontrol update state=down failed'"
        fi
    else
        skb_line="$skb_line action=none"
    fi
    if [ -x /bin/date ]; then skb_line="$(/bin/date +%Y-%m-%dT%H:%M:%S%z) $skb_line"; fi
    echo "$skb_line" >&2
    skb_log=${SKB_HOOK_LOG-/var/log/slurm/slurm-k8s-bridge-hooks.log}
    if [ -n "$skb_log" ]; then echo "$skb_line" >>"$skb_log"; fi
    exit 1
}

skb_args=$*
if [ ! -x "$SKB_PYTHON" ]; then
    skb_broken "${1:-}" "no Python at $SKB_PYTHON"
fi
# -P below needs 3.11; an older python3 (a RHEL-like host's 3.9) would exit 2 silently. One
# extra start with -S -E (no site, no environment: a few ms) asks the version first.
skb_version=$("$SKB_PYTHON" -S -E -c 'import sys; sys.stdout.write("%d.%d" % sys.version_info[:2])' 2>/dev/null)
case $skb_version in
    [0-9]*.[0-9]*) ;;
    *) skb_broken "${1:-}" "$SKB_PYTHON does not run" ;;
esac
skb_major=${skb_version%%.*}
skb_minor=${skb_version#*.}
if [ "$skb_major" -lt 3 ] || { [ "$skb_major" -eq 3 ] && [ "$skb_minor" -lt 11 ]; }; then
    skb_broken "${1:-}" "Python $skb_version is older than 3.11"
fi

# -P: do not put slurmctld's working directory on sys.path; -s: no user site-packages.
exec "$SKB_PYTHON" -P -s -m bridge.hooks "$skb_kind" "$@"
