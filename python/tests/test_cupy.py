"""cachalot.cupy without a GPU: enable() refuses cleanly without CuPy; the malloc/free pair it
gives CuPy's PythonFunctionAllocator allocates on the stream CuPy says, raises CuPy's
OutOfMemoryError (with cachalot's message) instead of ever returning 0, and never raises from
free; enable() wires it through cupy.cuda.set_allocator (a stand-in CuPy that behaves as
cupy/cuda/memory.pyx's PythonFunctionAllocator does). Real CuPy runs in gpu_check.py."""
import importlib.util
import textwrap

import pytest

from conftest import run_python


def test_enable_without_cupy_is_an_import_error():
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("cupy is installed here")
    run_python("""
        import pytest, cachalot.cupy
        with pytest.raises(ImportError, match="CuPy is not installed"):
            cachalot.cupy.enable()
        assert not cachalot.cupy.enabled()
    """)


def test_per_thread_default_stream_is_served_on_one_thread():
    # CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1: CuPy's current stream is Stream.ptds, whose ptr is
    # cudaStreamPerThread (0x2) on every thread (cupy/cuda/stream.pyx).
    proc = run_python("""
        import threading, pytest, cachalot
        from cachalot.cupy import allocator_functions
        malloc, free = allocator_functions(lambda device: 0x2, MemoryError)
        p = malloc(1 << 20, 0)
        q = malloc(1 << 20, 0)
        free(p, 0)
        seen = {}
        def other_thread():
            try:
                malloc(1 << 20, 0)
            except Exception as e:
                seen["error"] = e
            free(q, 0)   # served: waits for this thread's stream, then frees
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        assert isinstance(seen["error"], cachalot.NotSupportedError), seen
        assert "cudaStreamPerThread (0x2) from a second thread" in str(seen["error"])
        assert "CUPY_CUDA_PER_THREAD_DEFAULT_STREAM" in str(seen["error"])
        assert cachalot.memory_stats(0)["allocated_bytes.all.current"] == 0
        assert malloc(1 << 20, 0) != 0   # the first thread keeps its stream
    """, CACHALOT_LOG="warn")
    assert "cachalot [error]" not in proc.stderr, proc.stderr


def test_allocator_functions():
    proc = run_python("""
        import pytest, cachalot
        from cachalot.cupy import allocator_functions

        class OOM(MemoryError):  # CuPy's: OutOfMemoryError(size, total, limit)
            def __init__(self, size, total, limit=0):
                super().__init__(f"Out of memory allocating {size:,} bytes "
                                 f"(allocated so far: {total:,} bytes).")

        streams = []
        def stream(device):
            streams.append(device)
            return 0x100
        malloc, free = allocator_functions(stream, OOM)
        p = malloc(3 << 20, 0)
        assert p != 0 and streams == [0]
        s = cachalot.memory_stats(0)
        assert s["allocated_bytes.all.current"] == 3 << 20
        assert s["cachalot.num_streams"] == 1  # stream 0x100, as CuPy said
        with pytest.raises(OOM) as e:
            malloc(2 << 30, 0)
        text = str(e.value)
        assert text.startswith("Out of memory allocating 2,147,483,648 bytes "
                               "(allocated so far: 3,145,728 bytes).")
        assert "cachalot: out of memory: tried to allocate 2.00 GiB" in text
        assert isinstance(e.value.__cause__, cachalot.OutOfMemoryError)
        with pytest.raises(cachalot.InvalidArgumentError, match="outside"):
            malloc(16, 99)
        assert malloc(0, 0) == 0
        free(p, 0)
        assert cachalot.memory_stats(0)["allocated_bytes.all.current"] == 0
        free(p, 0)               # a double free: reported on stderr, not raised
        free(12345, 0)
    """, CACHALOT_LOG="off")
    assert proc.stderr.count("cachalot [error] cachalot.cupy free:") == 2, proc.stderr


def fake_cupy(root):
    """A stand-in `cupy`: PythonFunctionAllocator as cupy/cuda/memory.pyx writes it (malloc_func
    called in the memory object's constructor, free_func when it dies and only for a nonzero
    pointer), OutOfMemoryError(size, total, limit), set_allocator and get_current_stream."""
    pkg = root / "cupy"
    (pkg / "cuda").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import cuda\n")
    (pkg / "cuda" / "__init__.py").write_text(textwrap.dedent("""
        from . import memory
        allocator = None
        def set_allocator(a):
            global allocator
            allocator = a
        class _Stream:
            def __init__(self, ptr):
                self.ptr = ptr
        def get_current_stream(device_id=-1):
            return _Stream(0x200)
    """))
    (pkg / "cuda" / "memory.py").write_text(textwrap.dedent("""
        class OutOfMemoryError(MemoryError):
            def __init__(self, size, total, limit=0):
                super().__init__(f"Out of memory allocating {size:,} bytes "
                                 f"(allocated so far: {total:,} bytes).")
        class PythonFunctionAllocatorMemory:
            def __init__(self, size, malloc_func, free_func, device_id):
                self._free_func, self.device_id, self.size, self.ptr = free_func, device_id, size, 0
                if size > 0:
                    self.ptr = malloc_func(size, device_id)
            def __del__(self):
                if self.ptr:
                    self._free_func(self.ptr, self.device_id)
        class PythonFunctionAllocator:
            def __init__(self, malloc_func, free_func):
                self._malloc_func, self._free_func = malloc_func, free_func
            def malloc(self, size):
                return PythonFunctionAllocatorMemory(size, self._malloc_func, self._free_func, 0)
    """))
    return str(root)


def test_enable_wires_a_python_function_allocator(tmp_path):
    root = fake_cupy(tmp_path)
    run_python("""
        import pytest, cupy, cachalot, cachalot.cupy
        cachalot.cupy.enable("backend:simulated,capacity:1GiB")
        cachalot.cupy.enable("backend:simulated,capacity:1GiB")  # the same again: nothing
        assert cachalot.cupy.enabled()
        mem = cupy.cuda.allocator(1 << 20)
        assert mem.ptr != 0
        s = cachalot.memory_stats(0)
        assert s["allocated_bytes.all.current"] == 1 << 20
        with pytest.raises(cupy.cuda.memory.OutOfMemoryError, match="cachalot: out of memory"):
            cupy.cuda.allocator(2 << 30)
        del mem
        assert cachalot.memory_stats(0)["allocated_bytes.all.current"] == 0
        with pytest.raises(cachalot.InvalidArgumentError, match="exists already"):
            cachalot.cupy.enable("backend:simulated,capacity:2GiB")
    """, pythonpath=[root], CACHALOT_LOG="off")
