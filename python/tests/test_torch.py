"""cachalot.torch without a GPU: enable() refuses cleanly (without torch; with a torch that cannot
build the extension, saying what is missing and never installing PyTorch's pointer-unchecked
Python CUDAPluggableAllocator; after CUDA initialization; without CUDA), and the extension's
C++ logic, compiled against test doubles of PyTorch's headers in each of the three generations
of graph-pool setters, wires every hook and turns failures into exceptions. The real thing runs
on a GPU in gpu_check.py."""
import importlib.util
import os
import shutil
import subprocess
import textwrap

import pytest

from conftest import run_python

MOCK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_mock")


def test_enable_without_torch_is_an_import_error():
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed here")
    run_python("""
        import pytest, cachalot.torch
        with pytest.raises(ImportError, match="PyTorch is not installed"):
            cachalot.torch.enable()
        assert not cachalot.torch.enabled()
    """)


def fake_torch(root, cuda="12.4", initialized=False, headers=False):
    """A stand-in `torch` package: version, torch.cuda.is_initialized, cpp_extension (no ninja,
    include_paths, a load() that must not be reached) and a CUDAPluggableAllocator whose use
    is recorded, to prove it is never the fallback."""
    pkg = root / "torch"
    (pkg / "utils").mkdir(parents=True)
    include = root / "include"
    if headers:
        (include / "torch" / "csrc" / "cuda").mkdir(parents=True)
        (include / "torch" / "csrc" / "cuda" / "CUDAPluggableAllocator.h").write_text("")
    (pkg / "__init__.py").write_text(textwrap.dedent(f"""
        __version__ = "2.9.0+fake"
        class version:
            cuda = {cuda!r}
        class cuda:
            @staticmethod
            def is_initialized():
                return {initialized!r}
            class memory:
                used = []
                class CUDAPluggableAllocator:
                    def __init__(self, *a):
                        cuda.memory.used.append(a)
                @staticmethod
                def change_current_allocator(a):
                    cuda.memory.used.append(a)
    """))
    (pkg / "utils" / "__init__.py").write_text("")
    (pkg / "utils" / "cpp_extension.py").write_text(textwrap.dedent(f"""
        CUDA_HOME = None
        def verify_ninja_availability():
            raise RuntimeError("Ninja is required to load C++ extensions")
        def include_paths(cuda=False):
            return [{str(include)!r}]
        def load(**kw):
            raise AssertionError("load() reached despite missing tools")
    """))
    return str(root)


def test_enable_refuses_without_the_tools_and_never_falls_back(tmp_path):
    root = fake_torch(tmp_path)
    proc = run_python("""
        import pytest, torch, cachalot, cachalot.torch
        with pytest.raises(cachalot.torch.ExtensionError) as e:
            cachalot.torch.enable()
        message = str(e.value)
        assert "no C++ compiler ('/no/such/compiler'" in message, message
        assert "ninja is not installed" in message, message
        assert "PyTorch's C++ headers are not installed" in message, message
        assert "does not fall back to torch.cuda.memory.CUDAPluggableAllocator" in message
        assert isinstance(e.value, cachalot.NotSupportedError)
        assert torch.cuda.memory.used == [], "PyTorch's Python pluggable allocator was used"
        assert not cachalot.torch.enabled()
        print(message)
    """, pythonpath=[root], CXX="/no/such/compiler", CUDA_HOME="/nonexistent",
                      CUDA_PATH="/nonexistent")
    assert "cachalot.torch.enable() builds a small C++ extension" in proc.stdout


def test_enable_after_cuda_initialization_is_refused(tmp_path):
    root = fake_torch(tmp_path, initialized=True)
    run_python("""
        import pytest, cachalot.torch
        with pytest.raises(RuntimeError, match="before PyTorch initializes CUDA"):
            cachalot.torch.enable()
    """, pythonpath=[root])


def test_enable_without_cuda_support_is_refused(tmp_path):
    root = fake_torch(tmp_path, cuda=None)
    run_python("""
        import pytest, cachalot.torch
        with pytest.raises(cachalot.torch.ExtensionError, match="no CUDA support"):
            cachalot.torch.enable()
    """, pythonpath=[root])


def test_enable_checks_the_config_before_building(tmp_path):
    root = fake_torch(tmp_path, headers=True)
    run_python("""
        import pytest, cachalot, cachalot.torch
        with pytest.raises(cachalot.InvalidArgumentError, match="memory_limt"):
            cachalot.torch.enable("memory_limt:50%")
    """, pythonpath=[root])


def test_enable_after_reading_stats_still_configures(tmp_path):
    # Reading stats creates no default allocator (test_defaults.py), so enable(conf=...) can
    # still configure: it gets as far as building, which this fake torch cannot do.
    root = fake_torch(tmp_path, headers=True)
    run_python("""
        import pytest, cachalot, cachalot.torch
        assert cachalot.memory_stats()["allocated_bytes.all.current"] == 0
        with pytest.raises(cachalot.torch.ExtensionError, match="ninja is not installed"):
            cachalot.torch.enable(conf="backend:simulated,capacity:2GiB")
        cachalot.configure("backend:simulated,capacity:2GiB")  # the config enable() set
    """, pythonpath=[root])


@pytest.mark.parametrize("generation", [1, 2, 3])
def test_extension_logic_against_pytorch_header_doubles(generation, tmp_path):
    compiler = shutil.which(os.environ.get("CXX", "c++"))
    if compiler is None:
        pytest.skip("no C++ compiler")
    exe = tmp_path / "harness"
    subprocess.run([compiler, "-std=c++17", "-Wall", "-Wextra", "-Werror", "-O1",
                    f"-DMOCK_GEN={generation}", "-DTORCH_EXTENSION_NAME=cachalot_mock",
                    f"-I{MOCK}", os.path.join(MOCK, "harness.cpp"), "-o", str(exe)],
                   check=True, capture_output=True, text=True)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("ok")
