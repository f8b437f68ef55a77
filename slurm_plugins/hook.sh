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
# the work (and, for nodes no pool owns, execs the site's own program, SKB_SITE_*_PROGRAM).
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
            SKB_SLURM_CONF=* | SKB_SITE_RESUME_PROGRAM=* | SKB_SITE_SUSPEND_PROGRAM=* | \
            SKB_SITE_RESUME_FAIL_PROGRAM=*)
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

# A log value as bridge.hooks.log_value writes it: bare when it only holds A-Za-z0-9-_.,:/=@+[]~,
# else a JSON string escaping " \ and control characters (bytes past ASCII are copied as they are).
skb_value() {
    case $1 in
        "" | *[!]A-Za-z0-9_.,:/=@+~[-]*) ;;
        *) skb_v=$1; return ;;
    esac
    skb_s=$1
    skb_v=
    while [ -n "$skb_s" ]; do
        skb_r=${skb_s#?}
        skb_c=${skb_s%"$skb_r"}
        skb_s=$skb_r
        case $skb_c in
            \" | \\) skb_v="$skb_v\\$skb_c" ;;
            "$skb_tab") skb_v="$skb_v\\t" ;;
            "$skb_cr") skb_v="$skb_v\\r" ;;
            "
") skb_v="$skb_v\\n" ;;
            [[:cntrl:]]) skb_v="$skb_v$(printf '\\u%04x' "'$skb_c")" ;;
            *) skb_v="$skb_v$skb_c" ;;
        esac
    done
    skb_v="\"$skb_v\""
}

# Without a working Python nothing reaches the bridge; a resume must still not leave jobs waiting
# for ResumeTimeout: log a line (SKB_HOOK_LOG and stderr, in bridge.hooks' format) and, for a
# resume, set the nodes DOWN with the reason.
skb_broken() {
    skb_tab=$(printf '\t')
    skb_cr=$(printf '\r')
    skb_argv=
    for skb_arg in "$@"; do
        skb_value "$skb_arg"
        case $skb_v in \"*) ;; *) skb_v="\"$skb_v\"" ;; esac
        skb_argv="$skb_argv${skb_argv:+,}$skb_v"
    done
    skb_value "$skb_error"
    skb_line="slurm-k8s-bridge-hook[$$] $skb_kind argv=[$skb_argv] result=HookBroken error=$skb_v"
    skb_value "$SKB_PYTHON"
    skb_line="$skb_line python=$skb_v"
    if [ "$skb_kind" = resume ] && [ -n "${1:-}" ]; then
        if "${SKB_SLURM_BIN:-/usr/bin}/scontrol" update "nodename=$1" state=down \
            "reason=k8s: HookBroken: $skb_error"; then
            skb_line="$skb_line action=scontrol-state=down"
        else
            skb_line="$skb_line action=\"scontrol update state=down failed\""
        fi
    else
        skb_line="$skb_line action=none"
    fi
    if [ -x /bin/date ]; then skb_line="$(/bin/date +%Y-%m-%dT%H:%M:%S%z) $skb_line"; fi
    printf '%s\n' "$skb_line" >&2 # not echo: dash's reads the line's backslashes
    skb_log=${SKB_HOOK_LOG-/var/log/slurm/slurm-k8s-bridge-hooks.log}
    if [ -n "$skb_log" ]; then printf '%s\n' "$skb_line" >>"$skb_log"; fi
    exit 1
}

if [ ! -x "$SKB_PYTHON" ]; then
    skb_error="no Python at $SKB_PYTHON"
    skb_broken "$@"
fi
# -P below needs 3.11; an older python3 (a RHEL-like host's 3.9) would exit 2 silently. One
# extra start with -S -E (no site, no environment: a few ms) asks the version first.
skb_version=$("$SKB_PYTHON" -S -E -c 'import sys; sys.stdout.write("%d.%d" % sys.version_info[:2])' 2>/dev/null)
case $skb_version in
    [0-9]*.[0-9]*) ;;
    *) skb_error="$SKB_PYTHON does not run"; skb_broken "$@" ;;
esac
skb_major=${skb_version%%.*}
skb_minor=${skb_version#*.}
if [ "$skb_major" -lt 3 ] || { [ "$skb_major" -eq 3 ] && [ "$skb_minor" -lt 11 ]; }; then
    skb_error="Python $skb_version is older than 3.11"
    skb_broken "$@"
fi

# -P: do not put slurmctld's working directory on sys.path; -s: no user site-packages.
exec "$SKB_PYTHON" -P -s -m bridge.hooks "$skb_kind" "$@"
