# Shared by resume, suspend, resume_fail and node_event; sourced, never run on its own.
#
# slurmctld runs its hooks with no PATH (only PWD, SHLVL, SLURM_CONF, and SLURM_RESUME_FILE for
# a resume), so this uses shell builtins and absolute paths only. It finds:
#   settings   hooks.env next to the hook as invoked, else next to the real file (after
#              symlinks); only the SKB_* keys below are read, as KEY=value lines (no code runs)
#   Python     SKB_PYTHON, else <repo>/.venv/bin/python, else /usr/bin/python3
# and then execs `python -m bridge.hooks <kind> <args>`, which does the work.
# Expects: skb_kind (resume|suspend|resume_fail|node_event), skb_self (the hook's real path,
# symlinks resolved), "$@" as slurmctld passed it.

skb_invoked=$0
case $skb_invoked in */*) ;; *) skb_invoked=./$skb_invoked ;; esac
skb_dir=$(cd -P -- "${skb_self%/*}" && pwd -P)
skb_repo=${skb_dir%/*}

skb_env=${skb_invoked%/*}/hooks.env
[ -r "$skb_env" ] || skb_env=$skb_dir/hooks.env
if [ -r "$skb_env" ]; then
    while IFS= read -r skb_line || [ -n "$skb_line" ]; do
        case $skb_line in
            SKB_PYTHON=* | SKB_SOCKET=* | SKB_SLURM_BIN=* | SKB_HOOK_LOG=* | SKB_TIMEOUT_S=* | \
            SKB_TLS_CERT=* | SKB_TLS_KEY=* | SKB_TLS_CA=*)
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

if [ ! -x "$SKB_PYTHON" ]; then
    # Without Python nothing reaches the bridge; a resume must still not leave jobs waiting
    # for ResumeTimeout.
    echo "slurm-k8s-bridge-hook: no Python at $SKB_PYTHON" >&2
    if [ "$skb_kind" = resume ] && [ -n "${1:-}" ]; then
        "${SKB_SLURM_BIN:-/usr/bin}/scontrol" update "nodename=$1" state=down \
            "reason=k8s: HookBroken: no Python at $SKB_PYTHON"
    fi
    exit 1
fi

# -P: do not put slurmctld's working directory on sys.path; -s: no user site-packages.
exec "$SKB_PYTHON" -P -s -m bridge.hooks "$skb_kind" "$@"
