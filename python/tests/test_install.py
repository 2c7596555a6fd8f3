"""The package finds its libcachalot.so without any environment variable, installed both ways:
`pip install --no-build-isolation ./python` (the documented line, run in a fresh venv that has
pip and nothing else: no wheel, no setuptools, no package index; the library inside the
package, here the build's library packaged through CACHALOT_PREBUILT_LIBRARY instead of
building it again) and `cmake --install` (the package next to the installed library, in the
directory the configuring interpreter reads: site-packages, or dist-packages for Debian's
python3)."""
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest

import cachalot

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SITE_DIR = os.path.join(ROOT, "cmake", "python_site_dir.py")
CHECK = """
import cachalot, os, sys
path = cachalot.library_path()
assert path.startswith(os.path.realpath(sys.argv[1])), (path, sys.argv[1])
with cachalot.Allocator("backend:simulated,capacity:1GiB") as a:
    a.malloc(1000)
    assert a.memory_stats()["allocated_bytes.all.current"] == 1024
print(path)
"""


def bare_env(pythonpath=None):
    """No CACHALOT_LIBRARY, no checkout on the path: only what was installed."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CACHALOT_LIBRARY", "PYTHONPATH", "CACHALOT_CONF")}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_check(expected_root, python=sys.executable, pythonpath=None):
    proc = subprocess.run([python, "-c", CHECK, expected_root], capture_output=True, text=True,
                          env=bare_env(pythonpath), cwd="/", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.strip()


def documented_pip_line():
    """The install line of docs/usage.md's "Install" section, as written."""
    with open(os.path.join(ROOT, "docs", "usage.md"), encoding="utf-8") as f:
        found = re.search(r"^(pip install [^#\n]*?)\s*(#.*)?$", f.read(), re.M)
    assert found, "no `pip install` line in docs/usage.md"
    return found.group(1).split()


def test_the_documented_pip_line_in_a_fresh_venv_with_only_pip(tmp_path):
    if importlib.util.find_spec("ensurepip") is None:
        pytest.skip(f"SKIPPED: {sys.executable} cannot make a venv with pip (no ensurepip; "
                    "Debian: apt-get install python3-venv)")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300,
                   env=bare_env())
    python = str(venv / "bin" / "python")
    # What a venv of Python 3.11 brings besides pip (setuptools; never wheel) goes too: the
    # build must need nothing but pip. Before, without wheel: "invalid command 'bdist_wheel'".
    for module in ("setuptools", "wheel"):
        subprocess.run([python, "-m", "pip", "uninstall", "-y", "-q", module],
                       capture_output=True, timeout=120, env=bare_env())
    for module in ("setuptools", "wheel"):
        gone = subprocess.run([python, "-c", "import " + module], capture_output=True,
                              env=bare_env())
        assert gone.returncode != 0, module + " is still importable in the venv"
    line = documented_pip_line()
    assert line[:2] == ["pip", "install"] and line[-1] == "./python", line
    env = dict(bare_env(), CACHALOT_PREBUILT_LIBRARY=cachalot.library_path(), PIP_NO_INDEX="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    proc = subprocess.run([python, "-m"] + line, capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    site = subprocess.run([python, SITE_DIR], capture_output=True, text=True, check=True)
    installed = venv / site.stdout.strip() / "cachalot"
    assert (installed / "lib" / "libcachalot.so").is_file()
    assert (installed / "_torch_ext.cpp").is_file()
    path = run_check(str(installed / "lib"), python=python)
    assert path.endswith("libcachalot.so")
    # The build left nothing in the checkout.
    status = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--ignored", "python"],
                            capture_output=True, text=True)
    if status.returncode == 0:
        left = [l for l in status.stdout.splitlines() if "__pycache__" not in l]
        assert not [l for l in left if "egg-info" in l or "/build/" in l], left


def cmake_cache(build):
    with open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8") as f:
        return dict(re.findall(r"^([A-Za-z0-9_]+):[A-Z]+=(.*)$", f.read(), re.M))


def build_dir():
    build = os.environ.get("CACHALOT_BUILD_DIR")
    if not build or shutil.which("cmake") is None:
        pytest.skip("SKIPPED: CACHALOT_BUILD_DIR (set by CTest) and cmake are needed")
    return build


def test_cmake_install_puts_the_package_next_to_the_library(tmp_path):
    build = build_dir()
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", build, "--prefix", str(prefix)], check=True,
                   capture_output=True, text=True, timeout=300)
    rel = cmake_cache(build)["CACHALOT_PYTHON_INSTALL_DIR"]
    found = glob.glob(str(prefix / "lib*" / "python3*" / "*-packages" / "cachalot"))
    assert found == [str(prefix / rel / "cachalot")], found
    assert not os.path.exists(os.path.join(found[0], "lib")), "no copy of the library"
    path = run_check(str(prefix), pythonpath=os.path.dirname(found[0]))
    assert os.path.dirname(path) != os.path.dirname(found[0])
    assert "/lib" in path and os.path.basename(path).startswith("libcachalot.so")


def site_dir_of(python):
    return subprocess.run([python, SITE_DIR], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_cmake_install_puts_the_package_where_the_interpreter_reads(tmp_path):
    """`cmake --install --prefix P`, P the prefix of the configuring interpreter's first site
    directory (/usr/local for Debian's python3: dist-packages, not site-packages), lands on
    that interpreter's sys.path. Staged with DESTDIR: the real prefix is never written."""
    build = build_dir()
    python = os.environ.get("CACHALOT_CMAKE_PYTHON")  # the interpreter CMake found (CTest)
    if not python:
        pytest.skip("SKIPPED: CACHALOT_CMAKE_PYTHON (set by CTest) is needed")
    rel = cmake_cache(build)["CACHALOT_PYTHON_INSTALL_DIR"]
    assert rel == site_dir_of(python), "configured before cmake/python_site_dir.py existed?"
    first = subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert first.endswith("/" + rel), (first, rel)
    prefix = first[:-len(rel) - 1]
    stage = tmp_path / "stage"
    proc = subprocess.run(["cmake", "--install", build, "--prefix", prefix],
                          env=dict(os.environ, DESTDIR=str(stage)), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (stage / first.lstrip("/") / "cachalot" / "__init__.py").is_file()
    on_path = subprocess.run([python, SITE_DIR, "--check", first])
    assert on_path.returncode == 0, f"{first} is not on {python}'s sys.path"
    assert "does not read" not in proc.stdout, proc.stdout


@pytest.mark.parametrize("python", sorted({sys.executable, "/usr/bin/python3"}))
def test_configured_with_an_interpreter_the_install_dir_is_on_its_path(python, tmp_path):
    """Configured with -DPython3_EXECUTABLE=<each interpreter here: Debian's python3 among them
    where it exists>, the package's install directory under the prefix of the interpreter's
    first site directory (/usr/local for Debian's: lib/python3.X/dist-packages; it was
    site-packages, which Debian's python3 never reads) is on the interpreter's sys.path."""
    if not os.path.exists(python) or shutil.which("cmake") is None:
        pytest.skip(f"SKIPPED: no {python} or no cmake")
    build = tmp_path / "configure-only"
    proc = subprocess.run(["cmake", "-S", ROOT, "-B", str(build), "-DPython3_EXECUTABLE=" + python,
                           "-DCACHALOT_BUILD_TESTS=OFF", "-DCACHALOT_BUILD_BENCHMARKS=OFF",
                           "-DCACHALOT_BUILD_EXAMPLES=OFF", "-DCACHALOT_CUDA=OFF"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rel = cmake_cache(str(build))["CACHALOT_PYTHON_INSTALL_DIR"]
    first = subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert first.endswith("/" + rel), (python, first, rel)
    assert subprocess.run([python, SITE_DIR, "--check", first]).returncode == 0


def test_an_install_outside_the_interpreters_path_says_how_to_reach_it(tmp_path):
    build = build_dir()
    proc = subprocess.run(["cmake", "--install", build, "--prefix", str(tmp_path / "elsewhere")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "does not read: set PYTHONPATH=" + str(tmp_path / "elsewhere") in proc.stdout, \
        proc.stdout
