#!/bin/sh
# Builds Slurm's NSS module (libnss_slurm.so.2) for the slurmd image, in the Containerfile's `nss`
# stage: Debian packages Slurm but not this module, so it is compiled here from the upstream
# tarball of Debian's slurm-wlm source package of exactly the image's Slurm version.
#
#   build-nss-slurm.sh SERIES MODE OUT      e.g. build-nss-slurm.sh 24.11 auto /out
#
# MODE: `required` fails when the source cannot be downloaded; `auto` then builds an image
# without the module (and says so); `no` skips the module. A compile failure always fails.
# OUT receives a tree copied onto the image's root:
#   usr/lib/<multiarch>/libnss_slurm.so.2    the module (only when built)
#   etc/nsswitch.conf                        the base's, with `slurm` after `files` for passwd
#                                            and group (only when built)
#   usr/local/share/slurm-k8s-bridge/nss-slurm-packages.txt
#                                            the runtime library the module needs, pinned
#                                            (libslurm<N>=<version>); empty without the module
#   usr/local/share/slurm-k8s-bridge/nss-slurm.txt
#                                            one line: `built ...` or `absent: <why>`
#
# Least work that gives the module: configure the tree (config.h only matters), then compile the
# one source file against the installed libslurm of the same version, as upstream's
# contribs/nss_slurm/Makefile.am links it. Not libslurmfull: that exports Slurm's internals
# unversioned (`error`, `list_next`, ...) and glibc's `error` would bind first in an ordinary
# process; libslurm exports only `slurm_`-prefixed names (src/common/slurm_xlator.h).
set -eu
series=$1 mode=$2 out=$3
share=$out/usr/local/share/slurm-k8s-bridge
install -d "$share"
: >"$share/nss-slurm-packages.txt"

absent() {
  echo "absent: $1" >"$share/nss-slurm.txt"
  echo "nss_slurm: WARNING: the image gets no libnss_slurm.so.2: $1" >&2
  exit 0
}

case $mode in
  no) absent "NSS_SLURM=no" ;;
  auto | required) ;;
  *) echo "nss_slurm: NSS_SLURM must be auto, required or no, not '$mode'" >&2; exit 2 ;;
esac

export DEBIAN_FRONTEND=noninteractive
# deb-src next to every deb source the base has: one-line lists and deb822 .sources alike.
for list in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
  if [ -f "$list" ]; then sed -n 's/^deb[[:space:]]/deb-src /p' "$list"; fi
done >/tmp/deb-src.list
mv /tmp/deb-src.list /etc/apt/sources.list.d/slurm-k8s-bridge-deb-src.list
for sources in /etc/apt/sources.list.d/*.sources; do
  if [ -f "$sources" ]; then sed -i 's/^Types:[[:space:]]*deb[[:space:]]*$/Types: deb deb-src/' "$sources"; fi
done
apt-get update -qq
# The headers' package first: its source version names the tarball, and it brings libslurm.
apt-get install -y -qq --no-install-recommends "libslurm-dev=${series}.*" >/dev/null
version=$(dpkg-query -W -f='${source:Version}' libslurm-dev)

mkdir -p /tmp/nss-slurm
cd /tmp/nss-slurm
# Only the upstream tarball: apt checks it against the signed Sources index. Debian's own part
# (packaging, security fixes in the daemons) does not change what the module compiles, and some
# mirrors serve the tarball without it.
if ! apt-get source -qq --tar-only -o APT::Sandbox::User=root "slurm-wlm=$version"; then
  [ "$mode" = required ] && {
    echo "nss_slurm: the mirror does not serve slurm-wlm $version's source (NSS_SLURM=required)" >&2
    exit 1
  }
  absent "the mirror does not serve slurm-wlm $version's source tarball"
fi
apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null
tar -xzf slurm-wlm_*.orig.tar.gz
cd slurm-*/
test -f contribs/nss_slurm/libnss_slurm.c

# config.h for the internal headers; munge is only needed by the daemons' auth plugin.
./configure -q --prefix=/usr --sysconfdir=/etc/slurm --disable-debug --without-munge \
  --disable-dependency-tracking >/dev/null
libdir=/usr/lib/$(gcc -print-multiarch)
install -d "$out$libdir" "$out/etc"
# -z defs: every symbol must come from libslurm or libc, else the link fails here, not in a job.
gcc -O2 -fPIC -shared -DHAVE_CONFIG_H -I. -fstack-protector-strong -D_FORTIFY_SOURCE=2 \
  -Wno-stringop-truncation -Wl,-soname,libnss_slurm.so.2 -Wl,-z,defs,-z,relro,-z,now \
  -o libnss_slurm.so.2 contribs/nss_slurm/libnss_slurm.c -lslurm
strip --strip-unneeded libnss_slurm.so.2 2>/dev/null || true
install -m 0644 libnss_slurm.so.2 "$out$libdir/libnss_slurm.so.2"

library=$(readlink -f "$libdir/libslurm.so")
package=$(dpkg-query -S "$library" | cut -d: -f1)
echo "$package=$(dpkg-query -W -f='${Version}' "$package")" >"$share/nss-slurm-packages.txt"

# Local files first: they answer root and the daemons' users at once, with no round trip to a
# slurmstepd; the job's user, who is not in them, falls through to slurm.
sed -E 's/^(passwd|group):([[:space:]]+)(.*)$/\1:\2\3 slurm/' /etc/nsswitch.conf \
  >"$out/etc/nsswitch.conf"
[ "$(grep -cE '^(passwd|group):.*[[:space:]]slurm$' "$out/etc/nsswitch.conf")" = 2 ]

echo "built from slurm-wlm $version (upstream tarball), links $(basename "$library") ($package)" \
  >"$share/nss-slurm.txt"
cat "$share/nss-slurm.txt"
