#!/usr/bin/env bash
# Installs the Debian packages the proving ground, the tests, the demo and the compose path need,
# then checks that every executable they run is there (idempotent, root to install).
#
#   install-deps.sh           install what is missing, then check
#   install-deps.sh --check   only check (no apt, any user); non-zero naming what is missing
#   install-deps.sh --list    print the table (executable package)
#
# SKB_DEPS_ROOT (default empty = /) is a prefix for --check only, so that a test can point the
# check at a tree of its own; apt always acts on this machine.
set -euo pipefail
export LC_ALL=C  # sort and comm must agree on one collation

# Executable -> Debian package, at the path dpkg ships it (dpkg -S). We install with
# --no-install-recommends (no surprise daemons), so anything a package only Recommends never
# arrives: every package we rely on is named here, one row per executable we run.
TABLE='
/usr/sbin/slurmctld                slurmctld     # Slurm 22.05 controller on the host
/usr/sbin/slurmd                   slurmd        # by hand on the host; the node image has its own
/usr/bin/scontrol                  slurm-client  # ping, show, update (bridge, tests)
/usr/bin/sinfo                     slurm-client  # the demo timeline, status
/usr/bin/squeue                    slurm-client
/usr/bin/sbatch                    slurm-client  # demo and e2e jobs
/usr/bin/srun                      slurm-client
/usr/bin/scancel                   slurm-client
/usr/bin/strigger                  slurm-client  # slurm_plugins/strigger-setup.sh
/usr/sbin/munged                   munge         # Slurm 22.05 authenticates through munge
/usr/sbin/slurmdbd                 slurmdbd      # Slurm 22.05 accounting (the site layout)
/usr/sbin/mariadbd                 mariadb-server-core  # the database of slurmdbd (no init script)
/usr/bin/mariadb-install-db        mariadb-server-core
/usr/bin/my_print_defaults         mariadb-client-core  # run by mariadb-install-db
/usr/bin/mariadb                   mariadb-client-core  # the grant for slurmdbd
/usr/sbin/useradd                  passwd        # SlurmUser, the bridge user, the job users
/usr/bin/containerd                containerd    # the real node runtime
/usr/bin/containerd-shim-runc-v2   containerd    # run by containerd
/usr/bin/ctr                       containerd    # image import
/usr/sbin/runc                     runc          # containerd, podman (crun fails on hybrid cgroups)
/usr/lib/cni/bridge                containernetworking-plugins  # the pod network (cni0)
/usr/lib/cni/host-local            containernetworking-plugins
/usr/lib/cni/loopback              containernetworking-plugins  # every pod sandbox
/usr/lib/cni/portmap               containernetworking-plugins
/usr/lib/cni/dnsname               golang-github-containernetworking-plugin-dnsname  # compose names
/usr/sbin/debootstrap              debootstrap   # image root filesystems
/bin/ip                            iproute2      # cni0, network namespaces
/usr/sbin/iptables                 iptables      # kube-proxy and the CNI plugins
/usr/sbin/ip6tables                iptables
/usr/sbin/iptables-save            iptables
/usr/sbin/iptables-restore         iptables
/usr/bin/openssl                   openssl       # the proving ground PKI
/usr/sbin/update-ca-certificates   ca-certificates  # HTTPS to the Go module proxy
/bin/tar                           tar           # image layers (--numeric-owner)
/bin/umount                        mount         # make down
/usr/sbin/chroot                   coreutils     # pip inside the bridge image root
/usr/bin/unshare                   util-linux    # Slurm 24.11/26.05 programs (slurm_series.py)
/usr/bin/python3                   python3-minimal  # slurm_plugins/hook.sh without a venv
/usr/lib/python3.11/ensurepip/__main__.py  python3.11-venv  # make venv: python3 -m venv needs ensurepip
/usr/bin/podman                    podman        # the compose path
/usr/bin/conmon                    conmon        # run by podman
/usr/bin/podman-compose            podman-compose
/usr/bin/buildah                   buildah       # images by hand (podman Recommends it)
/usr/bin/catatonit                 catatonit     # the pause image; podman only Recommends it
/usr/bin/systemd-tmpfiles          systemd       # the shipped tmpfiles.d file, run under --root
'
rows() { sed -e 's/#.*//' -e '/^[[:space:]]*$/d' <<<"$TABLE"; }

# Rows whose executable is absent or not an executable file under $1 (a prefix, "" = /). A
# Python module (*.py) is run by python, not exec'd: it only has to be there.
missing_rows() {
  local prefix=$1 path package
  while read -r path package; do
    [ -f "$prefix$path" ] && { [ -x "$prefix$path" ] || [[ $path == *.py ]]; } \
      || echo "$path $package"
  done < <(rows)
}

report_missing() {  # stdin: "path package" rows
  local path package
  while read -r path package; do
    echo "deps: $path missing (package $package)" >&2
  done
}

write_podman_config() {
  # podman (the compose path) on these VMs: cgroup v1 hybrid, no systemd, no CAP_SYS_RESOURCE.
  # Written only when the machine has none, so a site's own configuration is never replaced.
  [ -e /etc/containers/containers.conf ] && return 0
  mkdir -p /etc/containers
  cat > /etc/containers/containers.conf <<'CONF'
# Written by slurm-k8s-bridge's dev/install-deps.sh: what podman needs on these VMs
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

mode=${1:-install}
case $mode in
  install|--check|--list) ;;
  *) echo "usage: $0 [--check|--list]" >&2; exit 2 ;;
esac
count=$(rows | wc -l)

if [ "$mode" = --list ]; then
  rows | awk '{print $1, $2}'
  exit 0
fi

if [ "$mode" = --check ]; then
  gone=$(missing_rows "${SKB_DEPS_ROOT:-}")
  if [ -n "$gone" ]; then
    report_missing <<<"$gone"
    echo "deps: $(wc -l <<<"$gone") of $count executables missing (make deps installs them)" >&2
    exit 1
  fi
  echo "deps: all $count executables present"
  exit 0
fi

# A test's prefix must never steer apt on the real machine.
if [ -n "${SKB_DEPS_ROOT:-}" ]; then
  echo "deps: SKB_DEPS_ROOT is for --check only; unset it to install" >&2
  exit 2
fi

mapfile -t packages < <(rows | awk '{print $2}' | sort -u)
# Not installed at all; and installed but with an executable gone (apt install alone would not
# bring the file back: those are reinstalled).
mapfile -t absent < <({ dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${packages[@]}" \
                        2>/dev/null || true; } | awk '$2 == "installed" {print $1}' | sort -u \
                      | comm -23 <(printf '%s\n' "${packages[@]}") -)
mapfile -t broken < <(missing_rows "" | awk '{print $2}' | sort -u \
                      | comm -23 - <(printf '%s\n' "${absent[@]}"))

if [ ${#absent[@]} -eq 0 ] && [ ${#broken[@]} -eq 0 ]; then
  echo "deps: all $count executables present"
  write_podman_config
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  missing_rows "" | report_missing
  echo "deps: run as root to install: ${absent[*]} ${broken[*]}" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
if [ ${#absent[@]} -gt 0 ]; then
  echo "deps: installing ${absent[*]}"
  apt-get install -y -qq --no-install-recommends "${absent[@]}"
fi
if [ ${#broken[@]} -gt 0 ]; then
  echo "deps: reinstalling (an executable is gone) ${broken[*]}"
  apt-get install -y -qq --no-install-recommends --reinstall "${broken[@]}"
fi
write_podman_config

gone=$(missing_rows "")
if [ -n "$gone" ]; then
  report_missing <<<"$gone"
  exit 1
fi
echo "deps: all $count executables present"
