"""The build a non-x86 host makes: only the generic reduce kernels (ACCL_GENERIC_KERNELS,
which CMakeLists.txt also sets on any target that is not x86-64), compiled from this
checkout, and the native self-test (every algorithm, transport and reduce kernel checked
against a reference) passing on it."""

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.multiprocess
def test_the_generic_kernels_alone_build_and_pass_the_self_test(tmp_path):
    if shutil.which("cmake") is None:
        pytest.fail("cmake is needed to build the native self-test")
    build = tmp_path / "build"
    configure = [
        "cmake",
        "-S",
        str(REPO),
        "-B",
        str(build),
        "-DACCL_PYTHON_MODULE=OFF",
        "-DACCL_SELFTEST=ON",
        "-DACCL_GENERIC_KERNELS=ON",
        "-DCMAKE_BUILD_TYPE=Release",
    ]
    subprocess.run(configure, check=True, capture_output=True, timeout=300)
    subprocess.run(
        ["cmake", "--build", str(build), "--target", "accl_selftest", "-j", "2"],
        check=True,
        capture_output=True,
        timeout=900,
    )
    symbols = subprocess.run(
        ["nm", "-C", str(build / "libjax_accl_core.so")], capture_output=True, text=True
    ).stdout
    assert "kernels_generic::" in symbols and "kernels_avx2::" not in symbols
    done = subprocess.run(
        [str(build / "accl_selftest")], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith(" 0 failures"), done.stdout
