"""Running the replay tools from Python: cachalot-replay (cachalot on its simulated device) and
cachalot-pytorch-replay (PyTorch's own caching allocator on a host-only CUDA stand-in, built only
with -DCACHALOT_PYTORCH_SOURCE, tools/pytorch_peer), one process per replay, and the figures a
comparison needs from their JSON, the same way for both allocators:

  - smallest device: the smallest capacity (a multiple of the 2 MiB granule) on which the trace
    replays with no refused allocation, bisected to one granule, one process per probe (PyTorch's
    allocator is a process singleton);
  - peak reserved at a capacity (the GPU's size);
  - device calls: segment allocations and frees plus chunk maps and unmaps (cudaMalloc, cudaFree,
    cuMemMap, cuMemUnmap), the calls that cost the device time; an expandable segment's address
    range counts as a segment for both allocators (cachalot's segment_allocs and segment_frees
    include its ranges; PyTorch's cuMemAddressReserve and cuMemAddressFree are added);
  - syncs: explicit synchronizations plus the device-wide one each segment free implies;
  - device time: modeled by cachalot's device cost model for both (None when the replay's JSON
    has none, e.g. a build without the cost model).

Executables are found, in order: the path given, an environment variable (CACHALOT_REPLAY,
CACHALOT_PYTORCH_REPLAY), the build directory in CACHALOT_BUILD_DIR, the PATH.
"""
import json
import os
import shutil
import subprocess

__all__ = ["GRANULE", "ToolError", "find_replay", "find_pytorch_replay", "Figures",
           "cachalot_run", "pytorch_run", "smallest_capacity", "recommended_conf"]

GRANULE = 2 << 20
GiB = 1 << 30


class ToolError(RuntimeError):
    """A replay tool is missing or failed (the message says which and why)."""


def _find(name, env, explicit, subdir):
    for path in (explicit, os.environ.get(env)):
        if path:
            if not os.access(path, os.X_OK):
                raise ToolError("%s: not an executable (%s)" % (path, name))
            return path
    build = os.environ.get("CACHALOT_BUILD_DIR")
    if build:
        path = os.path.join(build, subdir, name)
        if os.access(path, os.X_OK):
            return path
    return shutil.which(name)


def find_replay(explicit=None):
    """The cachalot-replay executable, or None."""
    return _find("cachalot-replay", "CACHALOT_REPLAY", explicit, "tools")


def find_pytorch_replay(explicit=None):
    """The cachalot-pytorch-replay executable, or None (it is optional)."""
    return _find("cachalot-pytorch-replay", "CACHALOT_PYTORCH_REPLAY", explicit,
                 os.path.join("tools", "pytorch_peer"))


def _run_json(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        raise ToolError("%s exited with %d: %s" % (" ".join(cmd), p.returncode,
                                                   p.stderr.strip()[-2000:]))
    try:
        return json.loads(p.stdout)
    except ValueError as e:
        raise ToolError("%s: not JSON (%s)" % (" ".join(cmd), e)) from None


class Figures:
    """One replay's figures, the same fields for both allocators (see the module comment)."""

    def __init__(self, doc, allocator):
        self.doc = doc
        self.allocator = allocator
        self.complete = bool(doc["complete"])
        self.capacity = doc["capacity_bytes"]
        self.peak_reserved = doc["peak_reserved_bytes"]
        self.ooms = doc["ooms"]
        device = doc.get("device") or {}
        self.device_ms = doc.get("device_ms") if device.get("timing") == "modeled" else None
        if allocator == "pytorch":
            c = doc["calls"]
            self.device_calls = (c["cudaMalloc"] + c["cudaFree"] + c.get("cuMemAddressReserve", 0) +
                                 c.get("cuMemAddressFree", 0) + c["cuMemMap"] + c["cuMemUnmap"])
            self.syncs = doc["syncs"]
        else:
            self.device_calls = (doc["segment_allocs"] + doc["segment_frees"] + doc["chunk_maps"] +
                                 doc["chunk_unmaps"])
            self.syncs = (device.get("syncs", doc["device_syncs"]) +
                          device.get("implied_syncs", doc["segment_frees"]))


def _size(capacity):
    """A capacity for the tools' --capacity: bytes with their unit (a bare number is refused)."""
    return "%dB" % capacity if isinstance(capacity, int) else str(capacity)


def cachalot_run(tool, trace, capacity, config="", timeline=None):
    """cachalot-replay of `trace` at `capacity` bytes with `config` (one thread, no baseline);
    `timeline`: a CSV path for its memory after each operation."""
    cmd = [tool, "--json", "--repeat", "1", "--no-baseline", "--one-thread",
           "--capacity", _size(capacity)]
    if config:
        cmd += ["--config", config]
    if timeline:
        cmd += ["--timeline", timeline]
    return Figures(_run_json(cmd + ["--", str(trace)]), "cachalot")


def pytorch_run(tool, trace, capacity, expandable=False, stop_at_oom=False):
    """cachalot-pytorch-replay of `trace` at `capacity` bytes (one process)."""
    cmd = [tool, "--json", "--capacity", _size(capacity)]
    if expandable:
        cmd.append("--expandable")
    if stop_at_oom:
        cmd.append("--stop-at-oom")
    return Figures(_run_json(cmd + [str(trace)]), "pytorch")


def smallest_capacity(fits, peak, granule=GRANULE, max_factor=64):
    """The smallest multiple of `granule` on which `fits(capacity)` is true, assuming more
    capacity never hurts: doubling from the peak, then bisection to one granule. Returns
    (bytes or None when nothing up to max_factor x the peak fits, probes)."""
    probes = 0
    lo = (max(peak, 1) - 1) // granule * granule  # below the peak nothing fits
    hi = max(granule, -(-peak // granule) * granule)
    limit = max_factor * max(peak, granule)
    while True:
        if hi > limit:
            return None, probes
        probes += 1
        if fits(hi):
            break
        lo, hi = hi, -(-hi * 2 // granule) * granule
    while hi - lo > granule:
        mid = (lo + (hi - lo) // 2) // granule * granule
        probes += 1
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi, probes


def recommended_conf(tool, trace, capacity):
    """The CACHALOT_CONF that `cachalot-replay --tune` recommends for `trace` at `capacity`
    ("" when the defaults are best)."""
    doc = _run_json([tool, "--tune", "--json", "--repeat", "1", "--jobs", "1", "--capacity",
                     _size(capacity), "--", str(trace)])
    return "" if doc.get("recommended_is_default") else doc["recommended"]
