#!/bin/sh
# Write a kubeconfig for the bridge's ServiceAccount, for a bridge running outside the cluster.
#
#   make-kubeconfig.sh [-n NAMESPACE] [-s SERVICE_ACCOUNT] [-d DURATION] [-S SERVER]
#                      [-o OWNER[:GROUP]] OUT
#
# Uses kubectl's current context (an administrator's) to read the API server's address and CA
# and to ask for a token (`kubectl create token`, bound to the ServiceAccount, expires after
# DURATION, default 8760h; the API server may cap it). Re-run before it expires: a running
# bridge re-reads the file when it changes, no restart. -S overrides the server URL as the
# bridge's host must reach it.
#
# The file holds a credential: mode 0400, owned by OWNER (default: the user slurm-k8s-bridge
# when it exists, else whoever runs this). It is written to a temporary file in OUT's directory,
# given its owner and mode, then renamed over OUT, so the bridge never reads half a file or one
# it may not open; if any step fails OUT stays as it was.
set -eu
namespace=slurm
account=slurm-k8s-bridge
duration=8760h
server=
owner=
usage() {
    echo "usage: $0 [-n NAMESPACE] [-s SERVICE_ACCOUNT] [-d DURATION] [-S SERVER] [-o OWNER[:GROUP]] OUT" >&2
    echo "  writes OUT mode 0400 owned by OWNER (default: slurm-k8s-bridge if that user exists)" >&2
    exit 2
}
while getopts n:s:d:S:o:h opt; do
    case $opt in
    n) namespace=$OPTARG ;;
    s) account=$OPTARG ;;
    d) duration=$OPTARG ;;
    S) server=$OPTARG ;;
    o) owner=$OPTARG ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || usage
out=$1
if [ -z "$owner" ] && id -u slurm-k8s-bridge >/dev/null 2>&1; then
    owner=slurm-k8s-bridge
fi

cluster=$(kubectl config view --minify -o jsonpath='{.contexts[0].context.cluster}')
[ -n "$server" ] || server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
ca_data=$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
if [ -z "$ca_data" ]; then
    ca_file=$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority}')
    [ -n "$ca_file" ] || { echo "$0: the current context has no CA" >&2; exit 1; }
    ca_data=$(base64 -w0 <"$ca_file")
fi
token=$(kubectl -n "$namespace" create token "$account" --duration="$duration")

umask 077
# In OUT's directory, so the mv below is a rename: the bridge sees the old file or the new one.
tmp=$(mktemp "$out.XXXXXX")
trap 'rm -f "$tmp"' EXIT
trap 'exit 1' HUP INT TERM
# printf, not a here-document: a shell may write a here-document, token and all, to a temporary
# file of its own (bash before 5.1 does, under $TMPDIR).
c=${cluster:-kubernetes}
printf '%s\n' \
    "apiVersion: v1" \
    "kind: Config" \
    "clusters:" \
    "- name: $c" \
    "  cluster:" \
    "    server: $server" \
    "    certificate-authority-data: $ca_data" \
    "users:" \
    "- name: $account" \
    "  user:" \
    "    token: $token" \
    "contexts:" \
    "- name: $account@$c" \
    "  context:" \
    "    cluster: $c" \
    "    user: $account" \
    "    namespace: $namespace" \
    "current-context: $account@$c" >"$tmp"
# Owner and mode before the rename: OUT is never, even for a moment, a file the bridge cannot read
# or one others can.
if [ -n "$owner" ]; then
    chown "$owner" "$tmp" || {
        echo "$0: cannot make $out owned by $owner: run as root, or -o $(id -un) to keep it yours; $out is unchanged" >&2
        exit 1
    }
fi
chmod 0400 "$tmp"
mv -f "$tmp" "$out"
trap - EXIT
echo "wrote $out (mode 0400, owner ${owner:-$(id -un)}): ServiceAccount $namespace/$account at $server (token valid $duration or the server's cap)" >&2
