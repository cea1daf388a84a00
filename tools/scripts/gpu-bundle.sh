#!/usr/bin/env bash
# Packs a CUDA build's binaries with the Debian runtime they link (Open MPI, fmt, Boost),
# relocatable, for a GPU node that has the NVIDIA driver and CUDA's libraries but not
# these packages (a container image, a machine with no package access).
#
#   tools/scripts/gpu-bundle.sh BUILD_DIR OUT_DIR
#
# Writes OUT_DIR/bin (adagrouper, adagrouper-calib and, when built, calib_cuda_test),
# OUT_DIR/rt (the Debian packages unpacked: every library the binaries link from /lib or
# /usr/lib except the C and C++ runtimes, and Open MPI's launcher and plugins) and
# OUT_DIR/env.sh. On the node:
#
#   . OUT_DIR/env.sh        # PATH, LD_LIBRARY_PATH, Open MPI's and PMIx's prefixes, and the
#                           # CUDA, cuBLAS and NCCL libraries found on the node
#   tools/scripts/gpu-check.sh --prebuilt OUT_DIR/bin
#
# The node's C library must be at least as new as the build machine's. Needs apt-get
# (download only, no install) and dpkg on the build machine.
set -euo pipefail

die() {
  echo "gpu-bundle: $*" >&2
  exit 2
}
[ $# -eq 2 ] || die "usage: gpu-bundle.sh BUILD_DIR OUT_DIR"
build=$1 out=$2
[ -x "$build/adagrouper-calib" ] || die "$build/adagrouper-calib: not built (Meson found no MPI?)"
"$build/adagrouper-calib" --help 2>/dev/null | grep -q "This build: .*cuda" ||
  die "$build/adagrouper-calib: built without the CUDA backend (configure with -Dcuda=enabled -Dnccl=enabled)"

rm -rf "$out"
mkdir -p "$out/bin" "$out/debs" "$out/rt"
bins=("$build/adagrouper" "$build/adagrouper-calib")
[ -x "$build/tests/calib/calib_cuda_test" ] && bins+=("$build/tests/calib/calib_cuda_test")
cp "${bins[@]}" "$out/bin/"

# The packages of the libraries the binaries link, but the C/C++ runtime and CUDA's own
# (the node has those), plus Open MPI's launcher, its plugins and PMIx's.
packages=(openmpi-bin openmpi-common libpmix2)
while read -r lib; do
  case "$(basename "$lib")" in
    libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | libstdc++.so* | libgcc_s.so* | ld-linux*) continue ;;
    libz.so* | libudev.so*) continue ;;
  esac
  pkg=$(dpkg -S "$(readlink -f "$lib")" 2>/dev/null | head -1 | cut -d: -f1) ||
    die "$lib: no Debian package owns it"
  [ -n "$pkg" ] && packages+=("$pkg")
done < <(ldd "${bins[@]}" | awk '$3 ~ "^/(usr/)?lib/" {print $3}' | sort -u)
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)
echo "gpu-bundle: packages: ${packages[*]}"
(cd "$out/debs" && apt-get download "${packages[@]}" >/dev/null 2>&1) || die "apt-get download ${packages[*]} failed"
for f in "$out"/debs/*.deb; do dpkg -x "$f" "$out/rt"; done
rm -rf "$out/debs" "$out/rt/usr/share/doc" "$out/rt/usr/share/man" "$out/rt/usr/share/lintian"
# Debian names the launcher through its alternatives system, which the bundle has not.
ln -sf orterun "$out/rt/usr/bin/mpirun"
ln -sf orterun "$out/rt/usr/bin/mpiexec"
# This compiler's C++ runtime, used only where the node's is older than the binaries need.
mkdir -p "$out/cxx"
cp -L "$(g++ -print-file-name=libstdc++.so.6)" "$(g++ -print-file-name=libgcc_s.so.1)" "$out/cxx/"

cat >"$out/env.sh" <<'EOF'
# Sourced on the GPU node: the bundle's binaries and Debian runtime, relocated.
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rt=$bundle/rt/usr
export PATH=$bundle/bin:$rt/bin:$PATH
export OPAL_PREFIX=$rt PMIX_PREFIX=$rt/lib/x86_64-linux-gnu/pmix2
export PMIX_MCA_mca_base_component_path=$rt/lib/x86_64-linux-gnu/pmix2/lib/pmix
# PMIx compresses only the start-up data of large jobs; its warning would open every run.
export PMIX_MCA_pcompress_base_silence_warning=1
# One host, no InfiniBand or UCX libraries in the bundle: shared memory between ranks.
export OMPI_MCA_mca_base_component_show_load_errors=0 OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_osc=^ucx
ld=$rt/lib/x86_64-linux-gnu:$rt/lib/x86_64-linux-gnu/openmpi/lib
# CUDA's runtime, cuBLAS and NCCL: the first directory that has each (CUDA_HOME, the
# toolkit, the system, then the nvidia-* Python wheels of the node's python3).
dirs=("${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib
      /usr/lib/x86_64-linux-gnu)
site=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null || true)
for s in $site; do dirs+=("$s"/nvidia/*/lib "$s"/nvidia/cu13/lib); done
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  for d in "${dirs[@]}"; do
    if [ -e "$d/$lib" ]; then
      case ":$ld:" in *":$d:"*) ;; *) ld=$ld:$d ;; esac
      break
    fi
  done
done
export LD_LIBRARY_PATH=$ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if ldd "$bundle/bin/adagrouper" 2>&1 | grep -q "GLIBCXX.*not found"; then
  export LD_LIBRARY_PATH=$bundle/cxx:$LD_LIBRARY_PATH
fi
unset bundle rt ld dirs site s lib d
EOF
echo "gpu-bundle: wrote $out ($(du -sh "$out" | cut -f1)); on the node: . $out/env.sh"
