"""jax_accl's MPI library (libjax_accl_mpi.so) loaded directly, as MPItrampoline loads
it: the version and constants it must export, the communicators that need no other
process (MPI_COMM_SELF and its splits), the errors of what it does not do, and what
would otherwise end the process: negative counts, a failed allocation or thread start
(injected through jax_accl._accl_testing), a process marked unusable."""

import ctypes
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jax_accl import _accl, _accl_testing, xla_collectives
from jax_accl.testing import launch

TABLE = Path(__file__).resolve().parents[2] / "xla_ffi" / "mpiabi" / "abi_names.inc"


@pytest.fixture(scope="module")
def lib():
    return ctypes.CDLL(str(xla_collectives.LIBRARY))


def names(kind):
    return re.findall(rf"^ACCL_MPI_{kind}\((MPIX?ABI_\w+)\)$", TABLE.read_text(), re.M)


def value(lib, ctype, name):
    return ctype.in_dll(lib, name).value


def error_string(lib, code) -> str:
    text, length = ctypes.create_string_buffer(1024), ctypes.c_int()
    assert lib.MPIABI_Error_string(code, text, ctypes.byref(length)) == 0
    return text.value.decode()


def handle(lib, name):
    return ctypes.c_size_t(value(lib, ctypes.c_size_t, name))


def test_version_and_every_name_are_exported(lib):
    assert value(lib, ctypes.c_int, "mpiabi_version_major") == 2
    assert value(lib, ctypes.c_int, "mpiabi_version_minor") >= 9
    lib.mpiwrapper_export_fortran_constants_()
    for kind in ("FUNCTION", "INT", "HANDLE", "POINTER", "FUNCTION_POINTER", "OFFSET"):
        for name in names(kind):
            assert hasattr(lib, name), name


def test_constants_are_distinct_where_mpi_needs_it(lib):
    ints = {n: value(lib, ctypes.c_int, n) for n in names("INT")}
    assert ints["MPIABI_SUCCESS"] == 0
    errors = [
        v for n, v in ints.items() if n.startswith("MPIABI_ERR_") and n != "MPIABI_ERR_LASTCODE"
    ]
    assert len(set(errors)) == len(errors) and 0 < min(errors)
    assert max(errors) <= ints["MPIABI_ERR_LASTCODE"]
    levels = [ints[f"MPIABI_THREAD_{t}"] for t in ("SINGLE", "FUNNELED", "SERIALIZED", "MULTIPLE")]
    assert levels == sorted(set(levels))
    handles = [value(lib, ctypes.c_size_t, n) for n in names("HANDLE")]
    assert len(set(handles)) == len(handles)
    pointers = [value(lib, ctypes.c_void_p, n) for n in names("POINTER")]
    assert len(set(pointers)) == len(pointers) and None not in pointers


def test_a_function_xla_never_calls_fails_naming_itself(lib, capfd):
    code = lib.MPIABI_Barrier(handle(lib, "MPIABI_COMM_WORLD"))
    assert code != 0
    assert "MPI_Barrier is not implemented by jax_accl" in error_string(lib, code)
    assert "MPI_Barrier" in capfd.readouterr().err


def test_comm_self_and_its_split_reduce_gather_and_permute_in_place_of_mpi(lib):
    self_comm, dbl = handle(lib, "MPIABI_COMM_SELF"), handle(lib, "MPIABI_DOUBLE")
    x = np.arange(5, dtype=np.float64)
    y = np.zeros_like(x)
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    assert lib.MPIABI_Allreduce(ptr(x), ptr(y), 5, dbl, handle(lib, "MPIABI_SUM"), self_comm) == 0
    np.testing.assert_array_equal(y, x)
    split = ctypes.c_size_t()
    assert lib.MPIABI_Comm_split(self_comm, 7, 0, ctypes.byref(split)) == 0
    rank, size = ctypes.c_int(-1), ctypes.c_int(-1)
    assert lib.MPIABI_Comm_rank(split, ctypes.byref(rank)) == 0
    assert lib.MPIABI_Comm_size(split, ctypes.byref(size)) == 0
    assert (rank.value, size.value) == (0, 1)
    z = np.zeros_like(x)
    assert lib.MPIABI_Allgather(ptr(x), 5, dbl, ptr(z), 5, dbl, split) == 0
    np.testing.assert_array_equal(z, x)
    requests = (ctypes.c_size_t * 2)()
    w = np.zeros_like(x)
    byte = handle(lib, "MPIABI_BYTE")
    assert lib.MPIABI_Irecv(ptr(w), 40, byte, 0, 0, split, ctypes.byref(requests, 0)) == 0
    assert lib.MPIABI_Isend(ptr(x), 40, byte, 0, 0, split, ctypes.byref(requests, 8)) == 0
    ignore = ctypes.c_void_p(value(lib, ctypes.c_void_p, "MPIABI_STATUS_IGNORE"))
    for i in range(2):
        assert lib.MPIABI_Wait(ctypes.byref(requests, 8 * i), ignore) == 0
    np.testing.assert_array_equal(w, x)
    assert list(requests) == [value(lib, ctypes.c_size_t, "MPIABI_REQUEST_NULL")] * 2
    assert lib.MPIABI_Comm_free(ctypes.byref(split)) == 0
    assert split.value == value(lib, ctypes.c_size_t, "MPIABI_COMM_NULL")


def test_errors_name_the_call_and_what_is_wrong(lib):
    self_comm = handle(lib, "MPIABI_COMM_SELF")
    x = np.zeros(4, np.float32)
    p = x.ctypes.data_as(ctypes.c_void_p)
    sum_op = handle(lib, "MPIABI_SUM")
    code = lib.MPIABI_Allreduce(p, p, 4, handle(lib, "MPIABI_LONG_DOUBLE"), sum_op, self_comm)
    assert "MPI_Allreduce: datatype handle" in error_string(lib, code)
    code = lib.MPIABI_Allreduce(
        p, p, 4, handle(lib, "MPIABI_FLOAT"), handle(lib, "MPIABI_BAND"), self_comm
    )
    assert "only MPI_SUM, MPI_PROD, MPI_MIN and MPI_MAX" in error_string(lib, code)
    code = lib.MPIABI_Allreduce(
        p, p, 4, handle(lib, "MPIABI_FLOAT"), sum_op, ctypes.c_size_t(12345)
    )
    assert "MPI_Allreduce: an unknown communicator" in error_string(lib, code)
    # MPI_COMM_WORLD before jax.distributed.initialize() went through jax_accl.
    rank = ctypes.c_int()
    code = lib.MPIABI_Comm_rank(handle(lib, "MPIABI_COMM_WORLD"), ctypes.byref(rank))
    assert "jax.distributed.initialize()" in error_string(lib, code)
    assert "not one jax_accl returned" in error_string(lib, 999999)


def test_a_refused_split_gives_a_communicator_whose_calls_say_why(lib, capfd):
    """No process table (jax_accl's side not started): XLA ignores the split's error, so
    the split still gives a communicator, not MPI_COMM_NULL, and every call on it fails
    with the reason; stderr says it too (XLA makes checks of its own before some calls)."""
    world, null = handle(lib, "MPIABI_COMM_WORLD"), value(lib, ctypes.c_size_t, "MPIABI_COMM_NULL")
    split = ctypes.c_size_t(null)
    code = lib.MPIABI_Comm_split(world, 0, 0, ctypes.byref(split))
    assert code != 0 and "jax.distributed.initialize()" in error_string(lib, code)
    assert split.value != null
    x = np.zeros(4, np.int32)
    p = x.ctypes.data_as(ctypes.c_void_p)
    for _ in range(2):
        code = lib.MPIABI_Allreduce(
            p, p, 4, handle(lib, "MPIABI_INT"), handle(lib, "MPIABI_SUM"), split
        )
        text = error_string(lib, code)
        assert text.startswith("jax_accl: MPI_Allreduce on MPI communicator of color 0"), text
        assert "MPI_Comm_split (color 0, key 0) was refused" in text, text
        assert "jax.distributed.initialize()" in text, text
    assert "MPI_Comm_split (color 0, key 0) was refused" in capfd.readouterr().err
    undefined = ctypes.c_size_t(null)
    undefined_color = value(lib, ctypes.c_int, "MPIABI_UNDEFINED")
    lib.MPIABI_Comm_split(world, undefined_color, 0, ctypes.byref(undefined))
    assert undefined.value == null  # MPI_UNDEFINED asked for no communicator
    assert lib.MPIABI_Comm_free(ctypes.byref(split)) == 0


# A stand-in for jaxlib's libjax_common.so: its constructor does what MPItrampoline's
# does at `import jax` (dlopen MPITRAMPOLINE_LIB, check the MPI ABI version, look names
# up) and ends the process with exit(1) where that fails.
TRAMPOLINE = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void load(void) {
  const char* path = getenv("MPITRAMPOLINE_LIB");
  void* lib = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
  if (!lib) { fprintf(stderr, "MPItrampoline: Could not dlopen library %s\n", path); exit(1); }
  fprintf(stderr, "[MPItrampoline] Requiring MPI ABI version %d.%d.0\n", MAJOR, MINOR);
  const int* major = (const int*)dlsym(lib, "mpiabi_version_major");
  const int* minor = (const int*)dlsym(lib, "mpiabi_version_minor");
  if (*major != MAJOR || *minor < MINOR) {
    fprintf(stderr, "MPItrampoline: found MPI ABI version %d.%d\n", *major, *minor);
    exit(1);
  }
  static const char* names[] = {NAMES};
  for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); ++i)
    if (!dlsym(lib, names[i])) exit(1);
}
"""


def stand_in_jaxlib(tmp_path, name, major, minor, names):
    source = tmp_path / f"{name}.c"
    source.write_text(TRAMPOLINE)
    binary = tmp_path / f"{name}.so"
    listed = ",".join(f'"{n}"' for n in names)
    subprocess.run(
        ["gcc", "-shared", "-fPIC", f"-DMAJOR={major}", f"-DMINOR={minor}"]
        + [f"-DNAMES={listed}", "-o", str(binary), str(source), "-ldl"],
        check=True,
    )
    return binary


@pytest.mark.multiprocess
def test_a_jaxlib_that_would_not_load_the_library_is_an_error_naming_why(tmp_path):
    library = str(xla_collectives.LIBRARY)
    known = ["MPIABI_Allreduce", "MPIABI_COMM_WORLD", "MPIABI_Get_library_version"]
    fine = stand_in_jaxlib(tmp_path, "fine", 2, 9, known)
    xla_collectives.check_jaxlib(library, binary=fine, version="9.9.0")  # loads: no error
    future_abi = stand_in_jaxlib(tmp_path, "future_abi", 3, 0, known)
    with pytest.raises(
        xla_collectives.AcclError, match=r"jaxlib 9\.9\.0 .*Requiring MPI ABI version 3\.0\.0"
    ):
        xla_collectives.check_jaxlib(library, binary=future_abi, version="9.9.0")
    lacking = stand_in_jaxlib(tmp_path, "lacking", 2, 9, known + ["MPIABI_Future_call"])
    with pytest.raises(xla_collectives.AcclError, match=r"lacks: MPIABI_Future_call \(1 in all\)"):
        xla_collectives.check_jaxlib(library, binary=lacking, version="9.9.0")
    # The installed jaxlib: verified (CI checks its names, test_mpiabi_names.py).
    assert xla_collectives.jaxlib_version() in xla_collectives.VERIFIED_JAXLIB
    xla_collectives.check_jaxlib(library, version="9.9.0")  # and loads the library, checked


def test_the_library_answers_what_mpitrampoline_asks_when_verbose(lib):
    text = ctypes.create_string_buffer(256)
    length = ctypes.c_int()
    assert lib.MPIABI_Get_library_version(text, ctypes.byref(length)) == 0
    assert text.value.decode().startswith("jax_accl") and length.value == len(text.value)
    version, subversion = ctypes.c_int(), ctypes.c_int()
    assert lib.MPIABI_Get_version(ctypes.byref(version), ctypes.byref(subversion)) == 0
    assert (version.value, subversion.value) == (3, 1)


def ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def test_negative_counts_are_refused_naming_the_function_and_the_count(lib):
    """XLA passes counts as C ints: a collective-permute of 2 GiB or more (whose bytes it
    counts) reaches MPI_Isend as a negative count. Each call refuses one, naming itself
    and the count, instead of posting a wrapped-around size."""
    self_comm, byte, dbl = (
        handle(lib, n) for n in ("MPIABI_COMM_SELF", "MPIABI_BYTE", "MPIABI_DOUBLE")
    )
    x = np.zeros(4)
    sum_op = handle(lib, "MPIABI_SUM")
    request = ctypes.c_size_t()
    two_gib = -(2**31)  # 2 GiB of bytes, narrowed to int
    calls = {
        "MPI_Allreduce": (
            -1,
            lambda: lib.MPIABI_Allreduce(ptr(x), ptr(x), -1, dbl, sum_op, self_comm),
        ),
        "MPI_Allgather": (
            -2,
            lambda: lib.MPIABI_Allgather(ptr(x), -2, dbl, ptr(x), -2, dbl, self_comm),
        ),
        "MPI_Reduce_scatter": (
            -3,
            lambda: lib.MPIABI_Reduce_scatter(
                ptr(x), ptr(x), (ctypes.c_int * 1)(-3), dbl, sum_op, self_comm
            ),
        ),
        "MPI_Sendrecv": (
            -5,
            lambda: lib.MPIABI_Sendrecv(
                ptr(x), 4, byte, 0, 0, ptr(x), -5, byte, 0, 0, self_comm, None
            ),
        ),
        "MPI_Isend": (
            two_gib,
            lambda: lib.MPIABI_Isend(ptr(x), two_gib, byte, 0, 0, self_comm, ctypes.byref(request)),
        ),
        "MPI_Irecv": (
            two_gib,
            lambda: lib.MPIABI_Irecv(ptr(x), two_gib, byte, 0, 0, self_comm, ctypes.byref(request)),
        ),
    }
    for function, (count, call) in calls.items():
        code = call()
        assert code != 0, function
        text = error_string(lib, code)
        assert f"{function}: count {count} is negative" in text, text
        assert "2 GiB" in text, text


@pytest.fixture
def faults():
    """jax_accl._accl_testing.arm_fault, disarmed after the test."""
    yield _accl_testing.arm_fault
    _accl_testing.arm_fault("none", 0)


INJECTED = {
    "allocation": "out of memory (an allocation failed: std::bad_alloc)",
    "thread_start": "could not start a thread",
}


@pytest.mark.parametrize("kind", sorted(INJECTED))
def test_an_allocation_or_thread_start_that_fails_is_an_mpi_error_not_an_abort(lib, faults, kind):
    """An injected std::bad_alloc / std::system_error inside a call is the call's MPI
    error, naming the function (without the library's guard: std::terminate, SIGABRT);
    the call is no longer counted in flight, and the next call works."""
    self_comm, dbl, sum_op = (
        handle(lib, n) for n in ("MPIABI_COMM_SELF", "MPIABI_DOUBLE", "MPIABI_SUM")
    )
    x, y = np.arange(3.0), np.zeros(3)
    faults(kind, 1)
    code = lib.MPIABI_Allreduce(ptr(x), ptr(y), 3, dbl, sum_op, self_comm)
    assert code != 0
    assert error_string(lib, code).startswith(f"jax_accl: MPI_Allreduce: {INJECTED[kind]}")
    assert _accl.stats()["calls_in_flight"] == 0
    assert lib.MPIABI_Allreduce(ptr(x), ptr(y), 3, dbl, sum_op, self_comm) == 0
    np.testing.assert_array_equal(y, x)


def test_a_failed_post_or_wait_leaves_no_request_posted(lib, faults):
    """A post that fails drops what its op posted before (XLA returns without waiting);
    a wait that fails releases its step's other requests (XLA waits for none of them):
    a later wait finds them gone, none is left posted forever."""
    self_comm, byte = handle(lib, "MPIABI_COMM_SELF"), handle(lib, "MPIABI_BYTE")
    x, y = np.arange(4.0), np.zeros(4)
    requests = (ctypes.c_size_t * 2)()
    ignore = ctypes.c_void_p(value(lib, ctypes.c_void_p, "MPIABI_STATUS_IGNORE"))
    null = value(lib, ctypes.c_size_t, "MPIABI_REQUEST_NULL")

    def wait(i):
        return lib.MPIABI_Wait(ctypes.byref(requests, 8 * i), ignore)

    assert lib.MPIABI_Irecv(ptr(y), 32, byte, 0, 0, self_comm, ctypes.byref(requests, 0)) == 0
    faults("allocation", 1)
    code = lib.MPIABI_Isend(ptr(x), 32, byte, 0, 0, self_comm, ctypes.byref(requests, 8))
    assert "MPI_Isend: out of memory" in error_string(lib, code)
    assert "MPI_Wait: an unknown request" in error_string(lib, wait(0))  # dropped
    # A step posted, its first wait fails: the other request is released with it.
    assert lib.MPIABI_Irecv(ptr(y), 32, byte, 0, 0, self_comm, ctypes.byref(requests, 0)) == 0
    assert lib.MPIABI_Isend(ptr(x), 32, byte, 0, 0, self_comm, ctypes.byref(requests, 8)) == 0
    faults("allocation", 1)
    assert "MPI_Wait: out of memory" in error_string(lib, wait(0))
    assert requests[0] == null
    assert "MPI_Wait: an unknown request" in error_string(lib, wait(1))
    # A step of three whose second wait fails (a message to itself that nothing from
    # itself matches): the third request goes with it.
    three = (ctypes.c_size_t * 3)()
    assert lib.MPIABI_Irecv(ptr(y), 32, byte, 0, 0, self_comm, ctypes.byref(three, 0)) == 0
    assert lib.MPIABI_Isend(ptr(x), 32, byte, 0, 0, self_comm, ctypes.byref(three, 8)) == 0
    assert lib.MPIABI_Isend(ptr(x), 16, byte, 0, 0, self_comm, ctypes.byref(three, 16)) == 0
    assert lib.MPIABI_Wait(ctypes.byref(three, 0), ignore) == 0
    code = lib.MPIABI_Wait(ctypes.byref(three, 16), ignore)
    assert "no matching one from itself" in error_string(lib, code)
    assert three[2] == null
    code = lib.MPIABI_Wait(ctypes.byref(three, 8), ignore)
    assert "MPI_Wait: an unknown request" in error_string(lib, code)
    assert _accl.stats()["calls_in_flight"] == 0
    # And the next op runs.
    assert lib.MPIABI_Irecv(ptr(y), 32, byte, 0, 0, self_comm, ctypes.byref(requests, 0)) == 0
    assert lib.MPIABI_Isend(ptr(x), 32, byte, 0, 0, self_comm, ctypes.byref(requests, 8)) == 0
    assert wait(0) == 0 and wait(1) == 0
    np.testing.assert_array_equal(y, x)


UNUSABLE = r"""
import ctypes, json
from jax_accl import _accl_testing, xla_collectives
lib = ctypes.CDLL(str(xla_collectives.LIBRARY))
h = lambda n: ctypes.c_size_t(ctypes.c_size_t.in_dll(lib, n).value)
def text(code):
    buf, n = ctypes.create_string_buffer(1024), ctypes.c_int()
    assert lib.MPIABI_Error_string(code, buf, ctypes.byref(n)) == 0
    return buf.value.decode()
x = (ctypes.c_double * 2)()
_accl_testing.mark_process_unusable("a fence did not end (test)")
request, rank = ctypes.c_size_t(), ctypes.c_int(-1)
print("RESULT " + json.dumps({
    "allreduce": text(lib.MPIABI_Allreduce(x, x, 2, h("MPIABI_DOUBLE"), h("MPIABI_SUM"),
                                           h("MPIABI_COMM_SELF"))),
    "isend": text(lib.MPIABI_Isend(x, 16, h("MPIABI_BYTE"), 0, 0, h("MPIABI_COMM_SELF"),
                                   ctypes.byref(request))),
    "rank": lib.MPIABI_Comm_rank(h("MPIABI_COMM_SELF"), ctypes.byref(rank)),
}))
"""


@pytest.mark.multiprocess  # a fresh process: being unusable is for good
def test_a_process_marked_unusable_refuses_mpi_calls():
    done = subprocess.run(
        [sys.executable, "-c", UNUSABLE],
        env=launch.worker_env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")][-1]
    result = json.loads(line[len("RESULT ") :])
    for function, key in (("MPI_Allreduce", "allreduce"), ("MPI_Isend", "isend")):
        assert result[key].startswith(
            f"jax_accl: {function} refused: this process is no longer usable (restart the job): "
            "a fence did not end (test)"
        ), result
    assert result["rank"] == 0  # what communicates is refused, not a rank's question
