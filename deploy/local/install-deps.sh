#!/usr/bin/env bash
# Installs the Debian packages the proving ground and the tests need (idempotent, root).
set -euo pipefail
packages=(
  slurmctld slurmd slurm-client munge            # Slurm 22.05 on the host
  containerd runc containernetworking-plugins    # the real node's runtime and pod network
  debootstrap                                    # image root filesystems
  iproute2 iptables openssl ca-certificates tar  # bridge, certificates
  podman podman-compose buildah golang-github-containernetworking-plugin-dnsname  # compose path
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all Debian packages present"
  exit 0
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
