#!/bin/sh
# Write a kubeconfig for the bridge's ServiceAccount, for a bridge running outside the cluster.
#
#   make-kubeconfig.sh [-n NAMESPACE] [-s SERVICE_ACCOUNT] [-d DURATION] [-S SERVER] OUT
#
# Uses kubectl's current context (an administrator's) to read the API server's address and CA
# and to ask for a token (`kubectl create token`, bound to the ServiceAccount, expires after
# DURATION, default 8760h; the API server may cap it). Re-run before it expires. -S overrides
# the server URL as the bridge's host must reach it. The file holds a credential: mode 0600.
set -eu
namespace=slurm
account=slurm-k8s-bridge
duration=8760h
server=
usage() { echo "usage: $0 [-n NAMESPACE] [-s SERVICE_ACCOUNT] [-d DURATION] [-S SERVER] OUT" >&2; exit 2; }
while getopts n:s:d:S:h opt; do
    case $opt in
    n) namespace=$OPTARG ;;
    s) account=$OPTARG ;;
    d) duration=$OPTARG ;;
    S) server=$OPTARG ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || usage
out=$1

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
cat >"$out.tmp" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: ${cluster:-kubernetes}
  cluster:
    server: $server
    certificate-authority-data: $ca_data
users:
- name: $account
  user:
    token: $token
contexts:
- name: $account@${cluster:-kubernetes}
  context:
    cluster: ${cluster:-kubernetes}
    user: $account
    namespace: $namespace
current-context: $account@${cluster:-kubernetes}
KUBECONFIG
mv "$out.tmp" "$out"
echo "wrote $out: ServiceAccount $namespace/$account at $server (token valid $duration or the server's cap)" >&2
