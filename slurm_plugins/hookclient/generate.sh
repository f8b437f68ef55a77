#!/bin/sh
# Regenerates internal/bridgepb from proto/ (`generate.sh DIR` writes DIR/internal/bridgepb
# instead: tests/unit/test_hook_client.py checks the committed code that way). Needs the repo's
# venv for protoc (grpcio-tools ships it; SKB_PROTOC_PYTHON names another Python) and
# protoc-gen-go / protoc-gen-go-grpc on PATH:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
# The Go package is set with M options so the .proto (and the Python output) stays unchanged.
set -eu
here=$(cd -P -- "$(dirname -- "$0")" && pwd -P)
repo=${here%/slurm_plugins/hookclient}
python=${SKB_PROTOC_PYTHON:-$repo/.venv/bin/python}
module=github.com/slurm-k8s-bridge/skb-hook
out=${1:-$here}
map=Mslurm_k8s_bridge/v1/bridge.proto=$module/internal/bridgepb
"$python" -m grpc_tools.protoc -I"$repo/proto" \
    --go_out="$out" --go_opt=module=$module --go_opt="$map" \
    --go-grpc_out="$out" --go-grpc_opt=module=$module --go-grpc_opt="$map" \
    slurm_k8s_bridge/v1/bridge.proto
