"""The build backend of the cachalot Python package (PEP 517), on the standard library alone.

    pip install --no-build-isolation ./python          # from the repository root, offline

works wherever pip works: no setuptools, no `wheel` package, no package index (a fresh venv of
any Python 3.8+ has all it needs). The wheel holds the package (cachalot/*.py, the PyTorch
extension's source) and libcachalot.so in cachalot/lib/, built with CMake from this checkout
(only the shared library target; the CUDA backend loads the driver at run time and needs no
toolkit). CACHALOT_PREBUILT_LIBRARY=/absolute/path/libcachalot.so packages a library built
already instead. The library is native code but the Python code reaches it through ctypes, so
the wheel is tagged py3-none-<platform>: any CPython 3 on this platform.
"""
import base64
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sysconfig
import tarfile
import tempfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
ROOT = os.path.dirname(HERE)  # the checkout
NAME = "cachalot"
SUMMARY = ("A caching GPU memory allocator: drop-in for PyTorch and CuPy, with PyTorch-style "
           "statistics and snapshots")
REQUIRES_PYTHON = ">=3.8"
# The package's files besides its modules; cachalot/lib/ and _install_paths.py are written by a
# build or by cmake --install and never packaged from the source tree.
DATA_FILES = ["_torch_ext.cpp"]


def version():
    """The package's __version__ (cachalot/__init__.py), the one place it is written."""
    with open(os.path.join(HERE, NAME, "__init__.py"), encoding="utf-8") as f:
        found = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if not found:
        raise RuntimeError("cachalot: no __version__ in cachalot/__init__.py")
    return found.group(1)


def metadata():
    """Core metadata (METADATA / PKG-INFO, version 2.1)."""
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\n"
            "License: See LICENSE in the repository\nRequires-Python: %s\n"
            "Provides-Extra: test\nRequires-Dist: pytest; extra == \"test\"\n"
            % (NAME, version(), SUMMARY, REQUIRES_PYTHON))


def platform_tag():
    return re.sub(r"[^A-Za-z0-9]", "_", sysconfig.get_platform())


def wheel_name():
    return "%s-%s-py3-none-%s.whl" % (NAME, version(), platform_tag())


def dist_info():
    return "%s-%s.dist-info" % (NAME, version())


def wheel_file():
    return ("Wheel-Version: 1.0\nGenerator: cachalot build_backend\nRoot-Is-Purelib: false\n"
            "Tag: py3-none-%s\n" % platform_tag())


def package_files():
    """(path in the wheel, path on disk) of the package's modules and data files."""
    src = os.path.join(HERE, NAME)
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(src, "*.py")))
    names = [n for n in names if n != "_install_paths.py"] + DATA_FILES
    return [("%s/%s" % (NAME, n), os.path.join(src, n)) for n in names]


def build_library(work):
    """Builds libcachalot.so from the checkout into `work`; returns its path."""
    if not os.path.isfile(os.path.join(ROOT, "CMakeLists.txt")):
        raise RuntimeError("cachalot: %s is not a cachalot checkout; set "
                           "CACHALOT_PREBUILT_LIBRARY to a built libcachalot.so" % ROOT)
    if shutil.which("cmake") is None:
        raise RuntimeError("cachalot: building libcachalot.so needs CMake (scripts/setup-deps.sh "
                           "installs it), or set CACHALOT_PREBUILT_LIBRARY")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.check_call(["cmake", "-S", ROOT, "-B", work] + generator +
                          ["-DCMAKE_BUILD_TYPE=Release", "-DCACHALOT_BUILD_TESTS=OFF",
                           "-DCACHALOT_BUILD_BENCHMARKS=OFF", "-DCACHALOT_BUILD_EXAMPLES=OFF"])
    subprocess.check_call(["cmake", "--build", work, "--target", "cachalot_shared", "--parallel",
                           str(os.cpu_count() or 2)])
    found = sorted(glob.glob(os.path.join(work, "src", "libcachalot.so.*.*.*")))
    if not found:
        raise RuntimeError("cachalot: the build in %s made no libcachalot.so" % work)
    return found[-1]


def library(work):
    prebuilt = os.environ.get("CACHALOT_PREBUILT_LIBRARY")
    if not prebuilt:
        return build_library(work)
    if not os.path.isabs(prebuilt):
        raise RuntimeError("cachalot: CACHALOT_PREBUILT_LIBRARY must be an absolute path")
    if not os.path.isfile(prebuilt):
        raise RuntimeError("cachalot: CACHALOT_PREBUILT_LIBRARY=%s: no such file" % prebuilt)
    return os.path.realpath(prebuilt)


def record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arcname, digest, len(data))


def write_wheel(path, entries):
    """A wheel of `entries` ((name in the archive, bytes, executable)), with its RECORD."""
    record = dist_info() + "/RECORD"
    lines = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, data, executable in entries:
            info = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if executable else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
            lines.append(record_line(arcname, data))
        lines.append(record + ",,")
        info = zipfile.ZipInfo(record, date_time=(1980, 1, 1, 0, 0, 0))
        info.external_attr = 0o644 << 16
        z.writestr(info, "\n".join(lines) + "\n")


# --- PEP 517 hooks -------------------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    target = os.path.join(metadata_directory, dist_info())
    os.makedirs(target, exist_ok=True)
    with open(os.path.join(target, "METADATA"), "w", encoding="utf-8") as f:
        f.write(metadata())
    with open(os.path.join(target, "WHEEL"), "w", encoding="utf-8") as f:
        f.write(wheel_file())
    return dist_info()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    entries = []
    for arcname, disk in package_files():
        with open(disk, "rb") as f:
            entries.append((arcname, f.read(), False))
    with tempfile.TemporaryDirectory(prefix="cachalot-build-") as work:
        with open(library(work), "rb") as f:
            entries.append((NAME + "/lib/libcachalot.so", f.read(), True))
    entries.append((dist_info() + "/METADATA", metadata().encode(), False))
    entries.append((dist_info() + "/WHEEL", wheel_file().encode(), False))
    entries.append((dist_info() + "/top_level.txt", (NAME + "\n").encode(), False))
    os.makedirs(wheel_directory, exist_ok=True)
    write_wheel(os.path.join(wheel_directory, wheel_name()), entries)
    return wheel_name()


def build_sdist(sdist_directory, config_settings=None):
    """The Python sources and this backend. A wheel built from it needs
    CACHALOT_PREBUILT_LIBRARY (the library's sources are the whole checkout)."""
    base = "%s-%s" % (NAME, version())
    name = base + ".tar.gz"
    members = [("pyproject.toml", os.path.join(HERE, "pyproject.toml")),
               ("build_backend/cachalot_build.py", os.path.abspath(__file__))]
    members += package_files()
    os.makedirs(sdist_directory, exist_ok=True)
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for arcname, disk in members:
            t.add(disk, arcname="%s/%s" % (base, arcname), recursive=False)
        data = metadata().encode()
        info = tarfile.TarInfo("%s/PKG-INFO" % base)
        info.size = len(data)
        info.mode = 0o644
        with tempfile.TemporaryFile() as f:
            f.write(data)
            f.seek(0)
            t.addfile(info, f)
    return name
