#!/usr/bin/env bash
# Build nccl-tests (all_reduce_perf, alltoall_perf; single process, no MPI) from the source tarball
# in bench/vendor/ against the CUDA toolkit and the NCCL this machine has - the system one
# (NCCL_HOME, /usr) or the libnccl that the torch / nvidia-nccl-cu* wheels carry, so the
# figures are taken with the same NCCL the probe's torch uses.
# Usage: bench/build_nccl_tests.sh BUILDDIR   (prints the directory of the *_perf binaries last)
set -euo pipefail
build=$(realpath -m "${1:?usage: $0 BUILDDIR}")
here=$(cd "$(dirname "$0")" && pwd)
tarball=$(ls "$here"/vendor/nccl-tests-*.tar.gz | tail -1) || { echo "no nccl-tests tarball in $here/vendor" >&2; exit 2; }
python=${PYTHON:-python3}
mkdir -p "$build"

cuda=${CUDA_HOME:-}
if [ -z "$cuda" ]; then
  if command -v nvcc >/dev/null; then cuda=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
  else cuda=/usr/local/cuda; fi
fi
[ -x "$cuda/bin/nvcc" ] || { echo "no nvcc under $cuda (set CUDA_HOME)" >&2; exit 2; }

nccl=${NCCL_HOME:-}
if [ -z "$nccl" ]; then
  # the wheel's NCCL first: it is the one torch loads
  nccl=$("$python" -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
  if [ -z "$nccl" ] && [ -e /usr/include/nccl.h ]; then nccl=/usr; fi
fi
[ -n "$nccl" ] && [ -e "$nccl/include/nccl.h" ] || { echo "no nccl.h (set NCCL_HOME)" >&2; exit 2; }
# wheels ship libnccl.so.2 only and the linker wants libnccl.so: link through a small NCCL_HOME of links
home="$build/nccl-home"
shopt -s nullglob
libs=("$nccl"/lib/libnccl.so* "$nccl"/lib/x86_64-linux-gnu/libnccl.so*)
[ ${#libs[@]} -gt 0 ] || { echo "no libnccl.so* under $nccl/lib" >&2; exit 2; }
lib=${libs[0]}
mkdir -p "$home/lib"
ln -sfn "$nccl/include" "$home/include"
ln -sf "$lib" "$home/lib/libnccl.so"
echo "$(dirname "$lib")" >"$build/nccl-libdir"  # LD_LIBRARY_PATH for running the binaries

cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .) || cap=
gencode=${NVCC_GENCODE:-"-gencode=arch=compute_${cap:-90},code=sm_${cap:-90}"}

rm -rf "$build/src"
mkdir -p "$build/src"
tar -xzf "$tarball" -C "$build/src" --strip-components=1
{
  echo "nccl-tests $(basename "$tarball"), nvcc: $("$cuda/bin/nvcc" --version | grep release), nccl: $lib, $gencode"
} >"$build/build-info.txt"
make -C "$build/src/src" -j"$(nproc)" MPI=0 CUDA_HOME="$cuda" NCCL_HOME="$home" \
  NVCC_GENCODE="$gencode" BUILDDIR="$build/bin" "$build/bin/all_reduce_perf" "$build/bin/alltoall_perf" \
  >"$build/make.log" 2>&1 || { tail -40 "$build/make.log" >&2; exit 1; }
for b in all_reduce_perf alltoall_perf; do
  [ -x "$build/bin/$b" ] || { echo "make left no $build/bin/$b" >&2; tail -20 "$build/make.log" >&2; exit 1; }
done
cat "$build/build-info.txt"
echo "$build/bin"
