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
write_podman_config() {
  # podman (the compose path) on these VMs: cgroup v1 hybrid, no systemd, no CAP_SYS_RESOURCE.
  # Written only when the machine has none, so a site's own configuration is never replaced.
  [ -e /etc/containers/containers.conf ] && return 0
  mkdir -p /etc/containers
  cat > /etc/containers/containers.conf <<'CONF'
# Written by slurm-k8s-bridge's deploy/local/install-deps.sh: what podman needs on these VMs
# (cgroup v1 hybrid, no systemd, no CAP_SYS_RESOURCE).
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
  echo "deps: wrote /etc/containers/containers.conf (runc, cgroupfs) for podman"
}

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all Debian packages present"
  write_podman_config
  exit 0
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
write_podman_config
