# Sourced by the round scripts: libraries for the binaries built on the development machine.
G=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$G" && tar xJf libpack.tar.xz && cd - >/dev/null
SP=/opt/torch/.venv/lib/python3.12/site-packages
export LD_LIBRARY_PATH=$G/libpack:$SP/nvidia/cudnn/lib:$SP/nvidia/cu13/lib:$SP/nvidia/nccl/lib:$LD_LIBRARY_PATH
if ldd "$G/dlbench" | grep -q "libmpi.*not found"; then
  mkdir -p "$G/mpipack" && tar xJf "$G/mpipack.tar.xz" -C "$G/mpipack"
  export LD_LIBRARY_PATH=$G/mpipack:$LD_LIBRARY_PATH
  echo "env: using the carried OpenMPI libraries"
fi
export NCCL_NVLS_ENABLE=0
export PATH=/opt/torch/.venv/bin:$PATH
