"""Shared fixtures of the cachalot Python tests (run by CTest as `python -m pytest python/tests`,
on the simulated device; the PyTorch and CuPy parts that need a GPU are in gpu_check.py).

The package under test is the one imported (the checkout's python/ on PYTHONPATH, or an
installed one); CACHALOT_LIBRARY may point it at a build's libcachalot.so. Default allocators
live as long as their process, so every test about them runs a fresh interpreter (run_python).
"""
import os
import subprocess
import sys
import textwrap

import pytest

import cachalot

MiB = 1 << 20
GiB = 1 << 30
SIMULATED = "backend:simulated,capacity:1GiB"


def child_env(conf=SIMULATED, pythonpath=(), **extra):
    """The environment of a child interpreter: this one's, with CACHALOT_CONF = `conf` (None:
    unset), the package and library this process uses, and the test helpers importable."""
    env = dict(os.environ)
    env.pop("CACHALOT_CONF", None)
    if conf is not None:
        env["CACHALOT_CONF"] = conf
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(cachalot.__file__)))
    tests = os.path.dirname(os.path.abspath(__file__))  # children import the test helpers
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (*pythonpath, package_parent, tests, env.get("PYTHONPATH")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["CACHALOT_LIBRARY"] = cachalot.library_path()
    env.update(extra)
    return env


def run_python(code, conf=SIMULATED, check=True, pythonpath=(), **extra_env):
    """Runs `code` in a fresh interpreter (`pythonpath` first on its path); returns the
    CompletedProcess (text stdout/stderr). With `check`, a nonzero exit fails the test with
    the child's output."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=child_env(conf, pythonpath, **extra_env), timeout=120)
    if check and proc.returncode != 0:
        pytest.fail(f"child failed ({proc.returncode}):\nstdout:\n{proc.stdout}\n"
                    f"stderr:\n{proc.stderr}")
    return proc


@pytest.fixture
def allocator():
    """A fresh allocator of its own on a 1 GiB simulated device."""
    with cachalot.Allocator(SIMULATED) as a:
        yield a


@pytest.fixture
def replay_tool():
    """The cachalot-replay executable (skips when it is not built)."""
    from cachalot import _replaytools
    tool = _replaytools.find_replay()
    if tool is None:
        pytest.skip("cachalot-replay is not built (CACHALOT_BUILD_DIR, set by CTest)")
    return tool


@pytest.fixture
def pytorch_tool():
    """The cachalot-pytorch-replay executable (skips unless the build was pointed at PyTorch's
    source: it is optional)."""
    from cachalot import _replaytools
    tool = _replaytools.find_pytorch_replay()
    if tool is None:
        pytest.skip("cachalot-pytorch-replay is not built (configure with "
                    "-DCACHALOT_PYTORCH_SOURCE=/path/to/pytorch)")
    return tool
