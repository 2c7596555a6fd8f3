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


SLEEP_CONF = "backend:simulated,capacity:64MiB,host_backing:1,expandable_segments:1"


def stream_torch(root, stream=0x50):
    """A stand-in `torch` whose current stream is `stream` (torch.cuda.current_stream(device)
    .cuda_stream), for the tenant pools; enable() is not reached (the tests mark the extension
    installed: its malloc hook calls cachalot_default_malloc, as the tests do)."""
    pkg = root / "torch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent(f"""
        __version__ = "2.9.0+fake"
        class version:
            cuda = "12.4"
        class _Stream:
            cuda_stream = {stream}
        class cuda:
            asked = []
            @staticmethod
            def is_initialized():
                return True
            @staticmethod
            def current_device():
                return 0
            @staticmethod
            def current_stream(device=None):
                cuda.asked.append(device)
                return _Stream()
    """))
    return str(root)


# What the extension's malloc hook does (cachalot_default_malloc on the tensor's device and
# stream), so that the route is exercised through the default allocator the extension uses.
TORCH_MALLOC = """
    import ctypes, pytest, torch, cachalot, cachalot.torch
    from cachalot import _lib
    lib = _lib.load()
    MiB = 1 << 20
    def torch_malloc(size, stream=0x50):
        out = ctypes.c_void_p()
        _lib.check(lib.cachalot_default_malloc(0, ctypes.byref(out), size, stream))
        return out.value
    def torch_free(ptr, stream=0x50):
        _lib.check(lib.cachalot_default_free(0, ptr, 0, stream))
"""


def test_tenant_needs_enable(tmp_path):
    run_python("""
        import pytest, cachalot.torch
        with pytest.raises(RuntimeError, match="needs cachalot.torch.enable"):
            cachalot.torch.tenant("batch", sleepable=True)
    """, pythonpath=[stream_torch(tmp_path)], conf=SLEEP_CONF)


def test_tenant_routes_the_current_stream_and_sleeps_and_wakes(tmp_path):
    run_python(TORCH_MALLOC + """
    cachalot.torch._wired = "malloc free"  # the extension's hooks, as enable() would install
    batch = cachalot.torch.tenant("batch", sleepable=True, priority=-1)
    assert batch.name == "batch" and batch.device == 0
    with batch as p:
        assert p is batch
        w = torch_malloc(3 * MiB)            # on the current stream: the pool's
        other = torch_malloc(1 * MiB, 0x60)  # another stream: the default pool's
    assert torch.cuda.asked == [0]
    d = torch_malloc(1 * MiB)                # after the block: the default pool's
    st = batch.memory_stats()
    assert st["allocated_bytes.all.current"] == 3 * MiB, st
    assert cachalot.memory_stats()["allocated_bytes.all.current"] == 5 * MiB
    ctypes.memset(w, 0xA7, 3 * MiB)
    with cachalot.torch.asleep(batch, "offload"):
        assert batch.is_asleep()
        assert batch.memory_stats()["reserved_bytes.all.current"] == 0
        assert batch.memory_stats()["cachalot.sleep_bytes_offloaded"] == 3 * MiB
        with batch:  # an allocation routed to the sleeping pool is refused, typed
            with pytest.raises(cachalot.PoolAsleepError, match="'batch'"):
                torch_malloc(1 * MiB)
        torch_free(d)  # the rest of the process goes on
    assert not batch.is_asleep()
    assert ctypes.string_at(w, 3 * MiB) == b"\\xa7" * (3 * MiB)  # same address, same bytes
    assert cachalot.torch.sleep(batch, "discard") and not cachalot.torch.sleep(batch)
    assert cachalot.torch.wake(batch) and not cachalot.torch.wake(batch)
    assert batch.memory_stats()["cachalot.sleep_num_wakes"] == 2
    torch_free(w)
    torch_free(other, 0x60)
    assert cachalot.memory_stats()["allocated_bytes.all.current"] == 0
    cachalot.default_allocator().close()  # does nothing: the default allocator stays
    assert cachalot.default_allocator() is cachalot.default_allocator(0)
    assert "Pool 1 sleep: awake; sleeps 2" in cachalot.memory_summary()
    """, pythonpath=[stream_torch(tmp_path)], conf=SLEEP_CONF)


def test_tenant_on_fixed_segments_refuses_sleep_with_the_reason(tmp_path):
    run_python(TORCH_MALLOC + """
    cachalot.torch._wired = "malloc free"
    t = cachalot.torch.tenant("t", stream=0x70)
    with t:
        p = torch_malloc(1 * MiB, 0x70)
    with pytest.raises(cachalot.NotSupportedError, match="expandable_segments"):
        cachalot.torch.sleep(t)
    with pytest.raises(cachalot.InvalidArgumentError, match="unknown sleep mode"):
        with cachalot.torch.asleep(t, "nap"):
            pass
    assert not t.is_asleep()
    torch_free(p, 0x70)
    """, pythonpath=[stream_torch(tmp_path)], conf="backend:simulated,capacity:64MiB")
