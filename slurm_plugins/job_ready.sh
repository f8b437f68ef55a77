# PrologSlurmctld's work; sourced by hook.sh for skb_kind=job_ready, never run on its own.
#
# Why: a job that waited for its nodes to power up is started by slurmctld's periodic check, on
# average ~25 s after the last node registered (measured on 22.05, 24.11 and 26.05, see
# tests/data/slurm/*/job-start.txt). The end of a PrologSlurmctld makes slurmctld look at the job
# at once (0.07-0.28 s in the same measurements). So this waits, polling `sinfo` for the job's
# nodes (every 0.2 s for 5 s, then every second), until none is powered down, powering up or
# not responding, and returns.
#
# It always exits 0: a failing PrologSlurmctld requeues or holds the job. It stops waiting when a
# node of the job is DOWN/DRAIN/FAIL (Slurm requeues the job itself), when sinfo shows none of
# the nodes, when sinfo failed 5 times in a row (logged as result=sinfo-failed: check
# SKB_SLURM_CONF and SKB_SLURM_BIN), and after SKB_JOB_READY_MAX_S seconds (default 900).
# One line goes to SKB_HOOK_LOG only when it waited.
# Slurm passes SLURM_JOB_ID and SLURM_JOB_NODELIST.

# slurmctld gives a PrologSlurmctld no SLURM_CONF (unlike ResumeProgram): hooks.env names it when
# it is not Slurm's default path.
if [ -z "${SLURM_CONF:-}" ] && [ -n "${SKB_SLURM_CONF:-}" ]; then
    SLURM_CONF=$SKB_SLURM_CONF
    export SLURM_CONF
fi
skb_sinfo=${SKB_SLURM_BIN:-/usr/bin}/sinfo
skb_max_s=${SKB_JOB_READY_MAX_S:-900}
case $skb_max_s in '' | *[!0-9]*) skb_max_s=900 ;; esac
skb_nodes=${SLURM_JOB_NODELIST:-}
[ -n "$skb_nodes" ] && [ -x "$skb_sinfo" ] || exit 0

skb_waited_ms=0
skb_failures=0
skb_result=timeout
while [ "$skb_waited_ms" -lt $((skb_max_s * 1000)) ]; do
    if skb_states=$("$skb_sinfo" -h -N -n "$skb_nodes" -o %t 2>/dev/null); then
        skb_failures=0
        case $skb_states in
            '') skb_result=not-shown; break ;;
            *down* | *drain* | *drng* | *fail*) skb_result=node-down; break ;;
            *'#'* | *'~'* | *'%'* | *'*'*) ;;
            *) skb_result=ready; break ;;
        esac
    else
        # A wrong SLURM_CONF or SKB_SLURM_BIN must not hold every job for SKB_JOB_READY_MAX_S.
        skb_failures=$((skb_failures + 1))
        if [ "$skb_failures" -ge 5 ]; then skb_result=sinfo-failed; break; fi
    fi
    if [ "$skb_waited_ms" -lt 5000 ]; then
        /bin/sleep 0.2
        skb_waited_ms=$((skb_waited_ms + 200))
    else
        /bin/sleep 1
        skb_waited_ms=$((skb_waited_ms + 1000))
    fi
done

if [ "$skb_waited_ms" -gt 0 ]; then
    skb_line="slurm-k8s-bridge-hook[$$] job_ready job=${SLURM_JOB_ID:-?} hostlist=$skb_nodes"
    skb_line="$skb_line result=$skb_result waited_ms=$skb_waited_ms"
    if [ -x /bin/date ]; then skb_line="$(/bin/date +%Y-%m-%dT%H:%M:%S%z) $skb_line"; fi
    skb_log=${SKB_HOOK_LOG-/var/log/slurm/slurm-k8s-bridge-hooks.log}
    if [ -n "$skb_log" ]; then echo "$skb_line" >>"$skb_log" 2>/dev/null; fi
fi
exit 0
