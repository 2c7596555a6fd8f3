"""cachalot as PyTorch's CUDA allocator.

    import cachalot.torch
    cachalot.torch.enable()          # before PyTorch initializes CUDA (the first CUDA tensor)
    ...
    print(cachalot.torch.memory_summary())

enable() compiles a small C++ extension against the installed torch (once; PyTorch's
extension cache keeps it, see torch.utils.cpp_extension.load) that creates PyTorch's C++
CUDAPluggableAllocator with every hook the installed version has (malloc, free,
record_stream, empty_cache, memory fraction, init, and the CUDA-graph pool hooks) and makes it
the current allocator. Its malloc raises torch.OutOfMemoryError (torch.cuda.OutOfMemoryError)
with cachalot's message when cachalot cannot allocate, and a RuntimeError for any other
failure; PyTorch's Python torch.cuda.memory.CUDAPluggableAllocator would instead wrap the NULL
in a tensor at address 0 (torch/csrc/cuda/CUDAPluggableAllocator.cpp does not check the
pointer), so enable() never falls back to it: without a C++ compiler, ninja, PyTorch's C++
headers or the CUDA runtime headers it refuses with an error saying which is missing.

Under a pluggable allocator PyTorch's own torch.cuda.memory_stats(), memory_allocated(),
reset_peak_memory_stats() and memory_snapshot() raise (CUDAPluggableAllocator's
getDeviceStats, resetPeakStats and snapshot are TORCH_CHECK(false, ...)), and so does cacheInfo,
which torch.backends.cudnn.benchmark = True calls. Use this module's functions instead.

CUDA-graph private pools (torch.cuda.graph, CUDAGraph.capture_begin(pool=...) with a token
of torch.cuda.graph_pool_handle())
map to cachalot graph pools through the extension's graph-pool hooks, in each of PyTorch's
three generations of them: a capture's allocations come from its pool, which may grow during
the capture, and the pool's memory goes back once PyTorch releases it.

What raises under any pluggable allocator, cachalot included (PyTorch implements it only in its
own allocator; docs/usage.md cites the source of each): torch.cuda.MemPool (its constructor
calls createOrIncrefPool, which CUDAPluggableAllocator does not implement),
torch.compile(mode="reduce-overhead") and "max-autotune" (CUDA graph trees call
getCheckpointState after each recording: use "max-autotune-no-cudagraphs", or torch.cuda.graph),
torch.cuda.memory._record_memory_history (use config key trace_file, and dump_snapshot() below),
CUDA tensors through torch.multiprocessing (IPC handles: shareIpcHandle, getIpcDevPtr), and
torch.cuda.get_per_process_memory_fraction (the limit is in memory_summary()'s title).

Tenant pools that sleep and wake (a model's memory given back while it idles, and restored at
the same addresses, so its tensors and CUDA graphs stay valid; needs config key
expandable_segments:1):

    batch = cachalot.torch.tenant("batch", sleepable=True, priority=-1)
    with batch:                      # torch's allocations on this stream go to the pool
        model = load_batch_model().cuda()
    with cachalot.torch.asleep(batch, "offload"):   # its device memory is given back
        serve_critical_spike()
    # awake again: `model` has its weights, at the same addresses

A tenant pool is a pool of the default allocator of its device (the one the extension's hooks
call); its route is by stream (torch.cuda.current_stream() when the block is entered), so work
queued on that stream from any thread allocates from it while the block runs. A CUDA graph
captured inside still gets its own graph pool (graph pools never sleep).
"""
import glob
import os
import re
import shutil
import threading

import cachalot
from . import _lib

__all__ = ["enable", "enabled", "wired_hooks", "memory_stats", "memory_summary",
           "memory_snapshot", "snapshot", "dump_snapshot", "empty_cache",
           "reset_peak_memory_stats", "memory_allocated", "max_memory_allocated",
           "memory_reserved", "max_memory_reserved", "ExtensionError", "TenantPool", "tenant",
           "sleep", "wake", "asleep"]

_ENTRY_POINTS = (
    "cachalot_default_malloc", "cachalot_torch_free", "cachalot_default_record_stream",
    "cachalot_default_empty_cache", "cachalot_default_set_memory_fraction",
    "cachalot_torch_begin_allocate_to_pool", "cachalot_torch_end_allocate_to_pool",
    "cachalot_torch_release_pool", "cachalot_last_error",
)
_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_torch_ext.cpp")

_lock = threading.Lock()
_wired = None


class ExtensionError(cachalot.NotSupportedError):
    """enable() cannot build or load its C++ extension (the message says why)."""

    def __init__(self, message):
        super().__init__(_lib.NOT_SUPPORTED, message)


def _import_torch():
    try:
        import torch
    except ImportError as e:
        raise ImportError("cachalot.torch: PyTorch is not installed") from e
    return torch


def _cuda_include_dir(cpp_extension):
    """A directory with cuda_runtime_api.h: the CUDA toolkit or NVIDIA's pip wheels."""
    roots = [getattr(cpp_extension, "CUDA_HOME", None), os.environ.get("CUDA_HOME"),
             os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    dirs = [os.path.join(r, "include") for r in roots if r]
    try:
        import nvidia  # the CUDA runtime wheels PyTorch depends on (namespace package)
        for base in getattr(nvidia, "__path__", []):
            dirs += sorted(glob.glob(os.path.join(base, "*", "include")))
    except ImportError:
        pass
    for d in dirs:
        if os.path.isfile(os.path.join(d, "cuda_runtime_api.h")):
            return d
    return None


def _refusal(problems):
    return ExtensionError(
        "cachalot.torch.enable() builds a small C++ extension against your PyTorch, and cannot: "
        + "; ".join(problems) + ". It does not fall back to torch.cuda.memory."
        "CUDAPluggableAllocator, which turns a failed allocation into a tensor at address 0.")


def _build_extension(torch, verbose):
    try:
        from torch.utils import cpp_extension
    except ImportError as e:
        raise _refusal([f"torch.utils.cpp_extension cannot be imported ({e})"]) from e
    problems = []
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        problems.append(f"no C++ compiler ('{compiler}' is not on PATH; set CXX)")
    try:
        cpp_extension.verify_ninja_availability()
    except RuntimeError:
        problems.append("ninja is not installed (torch.utils.cpp_extension needs it)")
    header = "torch/csrc/cuda/CUDAPluggableAllocator.h"
    if not any(os.path.isfile(os.path.join(d, header)) for d in cpp_extension.include_paths()):
        problems.append(f"PyTorch's C++ headers are not installed ({header})")
    cuda_include = _cuda_include_dir(cpp_extension)
    if cuda_include is None:
        problems.append("the CUDA runtime headers (cuda_runtime_api.h) are not found: set "
                        "CUDA_HOME to a CUDA toolkit")
    if problems:
        raise _refusal(problems)
    name = "cachalot_torch_" + re.sub(r"\W", "_", torch.__version__)
    torch_lib = os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), "lib")
    try:
        return cpp_extension.load(
            name=name, sources=[_SOURCE], extra_include_paths=[cuda_include],
            extra_cflags=["-O2"], extra_ldflags=[f"-L{torch_lib}", "-ltorch_cuda", "-lc10_cuda"],
            with_cuda=False, verbose=verbose)
    except Exception as e:  # a compiler or linker error: the message has its output
        raise _refusal([f"building it failed: {e}"]) from e


def enable(conf=None, verbose=False):
    """Makes cachalot PyTorch's CUDA allocator. `conf`: the default allocators' config
    ("key:value,...", see CACHALOT_CONF; None: CACHALOT_CONF). Must run before PyTorch
    initializes CUDA. Calling it again with the same config does nothing.
    Raises ImportError without torch, ExtensionError when the extension cannot be built,
    InvalidArgumentError for a bad config, RuntimeError when CUDA is initialized already."""
    global _wired
    torch = _import_torch()
    with _lock:
        if _wired is not None:
            cachalot.configure(conf)  # the same config again, or an error
            return
        if getattr(torch.version, "cuda", None) is None:
            raise ExtensionError("cachalot.torch.enable(): this PyTorch has no CUDA support")
        if torch.cuda.is_initialized():
            raise RuntimeError(
                "cachalot.torch.enable() must run before PyTorch initializes CUDA (before the "
                "first CUDA tensor): PyTorch cannot change an allocator it has initialized")
        cachalot.configure(conf)
        ext = _build_extension(torch, verbose)
        _wired = ext.install({name: _lib.address(name) for name in _ENTRY_POINTS})


def enabled():
    """True once enable() has installed cachalot in this process."""
    return _wired is not None


def wired_hooks():
    """The PyTorch hooks enable() set (names), or None before enable()."""
    return None if _wired is None else _wired.split()


def _device(device):
    """A device index as torch.cuda functions take it (None: the current device)."""
    if device is None or getattr(device, "index", 0) is None or device == "cuda":
        torch = _import_torch()
        return torch.cuda.current_device() if torch.cuda.is_initialized() else 0
    if isinstance(device, str):
        return int(device.split(":", 1)[1])
    return cachalot._device(device)


def memory_stats(device=None):
    """cachalot.memory_stats() for the device (torch.cuda.memory_stats() keys)."""
    return cachalot.memory_stats(_device(device))


def memory_summary(device=None):
    """cachalot's memory summary table for the device."""
    return cachalot.memory_summary(_device(device))


def memory_snapshot(device=None):
    """Segments in the layout of torch.cuda.memory_snapshot() (None: every device)."""
    return cachalot.memory_snapshot(None if device is None else _device(device))


def snapshot(device=None):
    """The dict of torch.cuda.memory._snapshot() (None: every device)."""
    return cachalot.snapshot(None if device is None else _device(device))


def dump_snapshot(path="cachalot_snapshot.pickle", device=None):
    """Writes the pickle that pytorch.org/memory_viz opens (torch.cuda.memory._dump_snapshot)."""
    cachalot.dump_snapshot(path, None if device is None else _device(device))


def empty_cache():
    """Returns cachalot's cached memory on every device (what torch.cuda.empty_cache() does
    once enable() has run)."""
    cachalot.empty_cache()


def reset_peak_memory_stats(device=None):
    """Sets every peak of the device's allocator to its current value."""
    cachalot.reset_peak_memory_stats(_device(device))


def memory_allocated(device=None):
    """Bytes in live allocations (torch.cuda.memory_allocated())."""
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device=None):
    """Peak of memory_allocated() (torch.cuda.max_memory_allocated())."""
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device=None):
    """Bytes held in segments (torch.cuda.memory_reserved())."""
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device=None):
    """Peak of memory_reserved() (torch.cuda.max_memory_reserved())."""
    return memory_stats(device)["reserved_bytes.all.peak"]


class TenantPool:
    """A tenant pool of the default allocator of a device (tenant() makes one). Inside
    ``with pool:`` PyTorch's allocations on the stream that was current at entry come from the
    pool (blocks nest: the most recent route wins); freeing its tensors works anywhere. The
    pool lives as long as the process (its memory goes back with its tensors and empty_cache)."""

    def __init__(self, allocator, pool, name, device, stream):
        self.allocator, self.id, self.name, self.device = allocator, pool, name, device
        self._stream = stream

    def _current_stream(self):
        if self._stream is not None:
            return self._stream
        return int(_import_torch().cuda.current_stream(self.device).cuda_stream)

    def __enter__(self):
        self.allocator.begin_allocate(self.id, self._current_stream())
        return self

    def __exit__(self, *exc):
        self.allocator.end_allocate(self.id)
        return False

    def is_asleep(self):
        """True while the pool is asleep (or going to sleep, or waking)."""
        return self.allocator.is_asleep(self.id)

    def memory_stats(self):
        """The pool's counters, in the layout of memory_stats() (sleep figures included)."""
        return self.allocator.pool_stats(self.id)

    def __repr__(self):
        return f"TenantPool({self.name!r}, id={self.id}, device={self.device})"


def tenant(name="", sleepable=False, sleep_mode="offload", priority=0, limit=0, guarantee=0,
           on_sleep=None, device=None, stream=None):
    """Creates a tenant pool of the default allocator of `device` and returns it as a
    TenantPool, a context manager that routes PyTorch's allocations to it (see the module
    comment). `priority`, `limit`, `guarantee`, `sleepable`, `sleep_mode` and `on_sleep` are
    those of cachalot.Allocator.create_pool: a sleepable pool may be put to sleep by cachalot
    when a higher-priority pool would run out of memory. `stream`: an int cudaStream_t to route
    instead of the current stream. Needs enable() first (otherwise PyTorch's allocations do not
    reach cachalot) and config key expandable_segments:1 for sleep and wake."""
    if not enabled():
        raise RuntimeError("cachalot.torch.tenant() needs cachalot.torch.enable() first: "
                           "without it PyTorch's allocations never reach cachalot's pools")
    d = _device(device)
    a = cachalot.default_allocator(d)
    pool = a.create_pool(name, priority=priority, limit=limit, guarantee=guarantee,
                         sleepable=sleepable, sleep_mode=sleep_mode, on_sleep=on_sleep)
    return TenantPool(a, pool, name or f"pool {pool}", d, stream)


def sleep(pool, mode="offload"):
    """Puts a TenantPool to sleep: cachalot waits for the work queued on its memory (events on
    its streams, never a device-wide synchronize), keeps its live bytes in pinned host memory
    ("offload") or drops them ("discard", for caches and activations), and gives all its device
    memory back. Its tensors keep their addresses; allocating from the pool raises until
    wake(). Returns False if it was asleep already."""
    return pool.allocator.sleep(pool.id, mode)


def wake(pool):
    """Maps device memory behind a sleeping TenantPool's tensors again, at the same addresses,
    and copies offloaded bytes back. Returns False if it was awake. cachalot.OutOfMemoryError
    (naming the pool) leaves it asleep."""
    return pool.allocator.wake(pool.id)


def asleep(pool, mode="offload"):
    """A context manager: the TenantPool sleeps inside the ``with`` block and wakes at its end
    (also when the block raises): ``with cachalot.torch.asleep(batch): serve_spike()``."""
    return pool.allocator.asleep(pool.id, mode)
