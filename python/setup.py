"""Builds the cachalot Python package with its libcachalot.so inside (cachalot/lib/).

    pip install --no-build-isolation ./python          # from the repository root, offline

The library is built with CMake from this checkout (only the shared library target; the CUDA
backend where a CUDA toolkit is found, as in any cachalot build). To package a library built
already, set CACHALOT_PREBUILT_LIBRARY=/absolute/path/to/libcachalot.so at build time.
"""
import glob
import os
import shutil
import subprocess
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def build_library(work):
    """Builds libcachalot.so from the checkout into `work`; returns its path."""
    if not os.path.isfile(os.path.join(ROOT, "CMakeLists.txt")):
        raise RuntimeError(f"cachalot: {ROOT} is not a cachalot checkout; set "
                           "CACHALOT_PREBUILT_LIBRARY to a built libcachalot.so")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.check_call(["cmake", "-S", ROOT, "-B", work, *generator,
                           "-DCMAKE_BUILD_TYPE=Release", "-DCACHALOT_BUILD_TESTS=OFF",
                           "-DCACHALOT_BUILD_BENCHMARKS=OFF", "-DCACHALOT_BUILD_EXAMPLES=OFF"])
    subprocess.check_call(["cmake", "--build", work, "--target", "cachalot_shared", "--parallel",
                           str(os.cpu_count() or 2)])
    found = sorted(glob.glob(os.path.join(work, "src", "libcachalot.so.*.*.*")))
    if not found:
        raise RuntimeError(f"cachalot: the build in {work} made no libcachalot.so")
    return found[-1]


class build_py_with_library(build_py):
    """build_py, then libcachalot.so into cachalot/lib/ of the build."""

    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "cachalot", "lib")
        os.makedirs(target, exist_ok=True)
        prebuilt = os.environ.get("CACHALOT_PREBUILT_LIBRARY")
        if prebuilt:
            if not os.path.isabs(prebuilt):
                raise RuntimeError("cachalot: CACHALOT_PREBUILT_LIBRARY must be an absolute path")
            shutil.copyfile(os.path.realpath(prebuilt), os.path.join(target, "libcachalot.so"))
            return
        with tempfile.TemporaryDirectory(prefix="cachalot-build-") as work:
            shutil.copyfile(build_library(work), os.path.join(target, "libcachalot.so"))


class BinaryDistribution(Distribution):
    """The package carries a native library: its wheel is platform-specific."""

    def has_ext_modules(self):
        return True


setup(packages=["cachalot"],
      package_data={"cachalot": ["_torch_ext.cpp", "lib/libcachalot.so"]},
      cmdclass={"build_py": build_py_with_library},
      distclass=BinaryDistribution)
