"""The package finds its libcachalot.so without any environment variable, installed both ways:
`pip install --no-build-isolation ./python` (offline; the library inside the package; here the
build's library is packaged through CACHALOT_PREBUILT_LIBRARY instead of building it again) and
`cmake --install` (the package next to the installed library)."""
import glob
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

import cachalot

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CHECK = """
import cachalot, os, sys
path = cachalot.library_path()
assert path.startswith(os.path.realpath(sys.argv[1])), (path, sys.argv[1])
with cachalot.Allocator("backend:simulated,capacity:1GiB") as a:
    a.malloc(1000)
    assert a.memory_stats()["allocated_bytes.all.current"] == 1024
print(path)
"""


def bare_env(pythonpath):
    """No CACHALOT_LIBRARY, no checkout on the path: only what was installed."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CACHALOT_LIBRARY", "PYTHONPATH", "CACHALOT_CONF")}
    env["PYTHONPATH"] = pythonpath
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_check(pythonpath, expected_root):
    proc = subprocess.run([sys.executable, "-c", CHECK, expected_root], capture_output=True,
                          text=True, env=bare_env(pythonpath), cwd="/", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.strip()


def test_pip_install_from_the_checkout(tmp_path):
    for module in ("pip", "setuptools", "wheel"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed for {sys.executable}")
    # A copy of python/ (pip builds in the source tree; the checkout stays clean).
    source = tmp_path / "source"
    shutil.copytree(os.path.join(ROOT, "python", "cachalot"), source / "cachalot",
                    ignore=shutil.ignore_patterns("__pycache__", "lib", "_install_paths.py"))
    for name in ("setup.py", "pyproject.toml"):
        shutil.copy(os.path.join(ROOT, "python", name), source / name)
    target = tmp_path / "site"
    env = dict(os.environ, CACHALOT_PREBUILT_LIBRARY=cachalot.library_path(),
               PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                           "--no-deps", "--target", str(target), str(source)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path = run_check(str(target), str(target / "cachalot" / "lib"))
    assert path.endswith("libcachalot.so")


def test_cmake_install_puts_the_package_next_to_the_library(tmp_path):
    build = os.environ.get("CACHALOT_BUILD_DIR")
    if not build or shutil.which("cmake") is None:
        pytest.skip("CACHALOT_BUILD_DIR (set by CTest) and cmake are needed")
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", build, "--prefix", str(prefix)], check=True,
                   capture_output=True, text=True, timeout=300)
    found = glob.glob(str(prefix / "lib*" / "python3*" / "site-packages" / "cachalot"))
    assert len(found) == 1, found
    assert not os.path.exists(os.path.join(found[0], "lib")), "no copy of the library"
    path = run_check(os.path.dirname(found[0]), str(prefix))
    assert os.path.dirname(path) != os.path.dirname(found[0])
    assert "/lib" in path and os.path.basename(path).startswith("libcachalot.so")
