"""PyTorch memory snapshot -> cachalot trace: the converter behind `python -m cachalot.convert`.

A PyTorch user who ran ``torch.cuda.memory._record_memory_history()`` and saved
``torch.cuda.memory._dump_snapshot(path)`` has a pickle of one dict with ``device_traces`` (one
list of events per device), ``segments`` (the allocator's segments when the snapshot was taken)
and ``allocator_settings``. This module turns one device's events into the RMM-format CSV that
``cachalot-replay`` reads, with ``#`` comment lines in front carrying PyTorch's own reserved
figures, so that the replay prints them next to cachalot's where they compare.

Format checked against PyTorch's sources (PyTorch 2.6.0, Debian's pytorch 2.6.0+dfsg source
package; earlier reads at the commits named) and on eleven real snapshots taken on GPUs by their
authors (docs/benchmarks.md, "Real PyTorch snapshots"):
  - torch/csrc/cuda/memory_snapshot.cpp (pytorch/pytorch, commit 00067369c933): the keys of a
    snapshot (segments: device, address, total_size, stream, is_expandable, blocks with address,
    size, requested_size, state and frames; device_traces: action, addr, size, stream, time_us,
    frames; an ``oom`` event carries ``device_free`` instead of ``addr``) and the action names
    alloc, free_requested, free_completed, segment_alloc, segment_free, segment_map,
    segment_unmap, snapshot, oom;
  - c10/cuda/CUDACachingAllocator.cpp (2.6.0): ``alloc`` records the requested size
    (``orig_size``), ``free_requested`` and ``free_completed`` the block's requested size, ``oom``
    the rounded size and the device's free bytes; ``free_requested`` is recorded when the tensor
    is freed, ``free_completed`` when the block goes back to the cache (at once, or once the
    events of the streams recorded with record_stream have completed);
    ``segment_map``/``segment_unmap`` (expandable segments) add to and take from reserved_bytes
    like ``segment_alloc``/``segment_free``; newer versions also record ``user_defined``
    annotations (skipped as unknown actions);
  - torch/cuda/memory.py ``_dump_snapshot``: ``pickle.dump`` of that dict.

Mapping (documented in docs/usage.md):
  - ``alloc`` -> ``allocate`` (requested size, the event's stream), with the allocation's site
    (its innermost user frame, _frames.py) in a seventh column when the snapshot has frames;
  - ``free_completed`` -> ``free``, on the stream the block was allocated on. The memory is
    reusable only then: replaying the free at ``free_requested`` would let cachalot reuse a block
    that another stream may still be using (the replay has no record_stream), so its figures
    would be lower than any allocator could reach. A ``free_requested`` with no later
    ``free_completed`` (the snapshot was taken while the free was pending) leaves the block live;
  - ``oom`` -> ``allocate failure`` (the size PyTorch could not allocate);
  - the live set when the recorded window began (PyTorch's history is a ring of max_entries
    events: a window often starts in the middle of a run) becomes allocations at the trace's
    start, between two comment lines: the blocks the window frees without having allocated them
    (size and stream from the free event) and the blocks the snapshot's segments show allocated
    at its end that the window never allocated (size and stream from the segments). With them the
    trace's live bytes at its end equal the requested bytes of the snapshot's allocated blocks
    (checked and said in the summary);
  - segment events feed PyTorch's reserved figures: reserved at the window's start (exact with
    the segment list) apart from its peak; ``snapshot`` and unknown actions are skipped
    (counted).
The snapshot has no thread ids: every event is logged on thread 1. time_us, when present, gives
the time column (else the event index, one microsecond apart).

Unpickling runs no code from the file: only plain containers, strings and numbers are accepted
(a snapshot holds nothing else), so a pickle that names a class fails with a clear error.
"""
import argparse
import io
import pickle
import sys

from ._frames import SiteTable

__all__ = ["SnapshotError", "ConversionResult", "load_snapshot", "convert", "convert_file", "main"]

ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "snapshot", "oom")


class SnapshotError(ValueError):
    """The input is not a readable PyTorch memory snapshot (the message says why)."""


class _PlainUnpickler(pickle.Unpickler):
    """An unpickler that refuses every class and function: data only."""

    def find_class(self, module, name):
        raise SnapshotError("the pickle names %s.%s: a PyTorch memory snapshot holds only dicts, "
                            "lists, strings and numbers" % (module, name))


def load_snapshot(source):
    """Reads a snapshot from a path or a binary file object; returns the dict.

    Raises SnapshotError when the file is not a pickle, is truncated, or is not a snapshot."""
    try:
        if hasattr(source, "read"):
            data = source.read()
        else:
            with open(source, "rb") as f:
                data = f.read()
    except OSError as e:
        raise SnapshotError("cannot read %s: %s" % (source, e.strerror or e)) from None
    if not data:
        raise SnapshotError("empty file, not a pickle")
    try:
        snap = _PlainUnpickler(io.BytesIO(data)).load()
    except SnapshotError:
        raise
    except EOFError:
        if data[:1] != b"\x80":
            raise SnapshotError("not a pickle (the file ends before any pickled value)") from None
        raise SnapshotError("truncated pickle (the file ends before the data does)") from None
    except Exception as e:  # pickle raises many types for garbage input
        if "truncated" in str(e) and data[:1] == b"\x80":  # a binary pickle cut short
            raise SnapshotError("truncated pickle (%s)" % e) from None
        raise SnapshotError("not a pickle (%s: %s)" % (type(e).__name__, e)) from None
    if not isinstance(snap, dict) or "device_traces" not in snap:
        kind = type(snap).__name__
        raise SnapshotError("a pickle of a %s, not a PyTorch memory snapshot (no 'device_traces'; "
                            "save one with torch.cuda.memory._dump_snapshot())" % kind)
    traces = snap["device_traces"]
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise SnapshotError("'device_traces' is not a list of per-device event lists")
    return snap


def _int_field(event, key, index, device):
    value = event.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SnapshotError("device %d, event %d (%s): field '%s' is %r, not a non-negative "
                            "integer" % (device, index, event.get("action"), key, value))
    return value


class ConversionResult:
    """What a conversion found: counts, the reconstructed live set, PyTorch's reserved figures
    (``reserved_curve``: PyTorch's reserved bytes over the trace, as (operations of the trace
    replayed so far, bytes) at the start and after each segment event) and the CSV lines."""

    def __init__(self, device):
        self.device = device
        self.events = 0
        self.counts = {a: 0 for a in ACTIONS}
        self.unknown_actions = 0
        self.duplicate_allocs = 0       # alloc of an address already live (a free was lost)
        self.double_frees = 0           # free of an address freed before in the window (skipped)
        self.pending_frees = 0          # free_requested never completed before the snapshot
        self.live_at_end = 0            # allocations live at the end of the trace
        self.live_bytes_at_end = 0      # their requested bytes
        self.streams = set()
        self.reconstructed_freed = 0    # live before the window, freed in it (free event's size)
        self.reconstructed_live = 0     # live before the window, still allocated at the snapshot
        self.reconstructed_bytes = 0    # requested bytes of both
        self.size_mismatches = 0        # live at the end with another size than the snapshot's
        self.not_in_segments = 0        # live at the end of the trace, not in the segments
        self.peak_reserved_delta = 0    # highest reserved above the start of the trace
        self.low_reserved_delta = 0     # lowest (negative: segments older than the trace freed)
        self.net_reserved = 0           # reserved at the end minus at the start
        self.segments_reserved = None   # total_size of the device's segments at snapshot time
        self.allocated_at_snapshot = None  # block bytes allocated at snapshot time (rounded)
        self.requested_at_snapshot = None  # requested bytes of those blocks
        self.sites = 0                  # distinct allocation sites (user frames)
        self.reserved_curve = []        # PyTorch's reserved bytes: (trace operation, bytes)
        self.lines = []

    @property
    def reconstructed(self):
        """Allocations added at the start of the trace: the live set when the window began."""
        return self.reconstructed_freed + self.reconstructed_live

    @property
    def pytorch_peak_exact(self):
        return (self.segments_reserved is not None and
                self.segments_reserved - self.net_reserved >= -self.low_reserved_delta)

    @property
    def reserved_at_start(self):
        """PyTorch's reserved bytes when the window began: exact with the snapshot's segment
        list (that total minus the net change of the segment events), else the least that
        explains the events (0, or what freed segments older than the trace needed)."""
        if self.pytorch_peak_exact:
            return self.segments_reserved - self.net_reserved
        return max(0, -self.low_reserved_delta)

    @property
    def pytorch_peak_reserved(self):
        """PyTorch's peak reserved bytes over the window (exact or a lower bound, as the start)."""
        return self.reserved_at_start + self.peak_reserved_delta

    @property
    def cold_start(self):
        """True when PyTorch had nothing reserved and nothing allocated when the window began
        (known exactly): the window then holds PyTorch's whole run and its peak compares with a
        replay's. (Allocations live at a start with nothing reserved would be an inconsistent
        snapshot.)"""
        return (self.pytorch_peak_exact and self.reserved_at_start == 0 and
                self.reconstructed == 0)

    def header(self):
        exact = "exact" if self.pytorch_peak_exact else "lower-bound"
        out = ["# cachalot trace converted from a PyTorch memory snapshot (python -m "
               "cachalot.convert)",
               "# pytorch.device: %d" % self.device,
               "# pytorch.peak_reserved: %d" % self.pytorch_peak_reserved,
               "# pytorch.peak_reserved_kind: %s" % exact,
               "# pytorch.reserved_at_start: %d" % self.reserved_at_start,
               "# pytorch.reserved_at_start_kind: %s" % exact]
        if self.segments_reserved is not None:
            out.append("# pytorch.reserved_at_snapshot: %d" % self.segments_reserved)
        if self.allocated_at_snapshot is not None:
            out.append("# pytorch.allocated_at_snapshot: %d" % self.allocated_at_snapshot)
            out.append("# pytorch.requested_at_snapshot: %d" % self.requested_at_snapshot)
        out.append("# pytorch.reconstructed_allocations: %d" % self.reconstructed)
        out.append("# pytorch.reconstructed_bytes: %d" % self.reconstructed_bytes)
        out.append("# pytorch.pending_frees: %d" % self.pending_frees)
        return out

    def summary(self):
        c = self.counts
        parts = ["device %d: %d events (%d alloc, %d free_requested, %d free_completed, "
                 "%d segment_alloc, %d segment_free, %d segment_map, %d segment_unmap, %d oom, "
                 "%d snapshot, %d unknown actions)" % (
                     self.device, self.events, c["alloc"], c["free_requested"],
                     c["free_completed"], c["segment_alloc"], c["segment_free"],
                     c["segment_map"], c["segment_unmap"], c["oom"], c["snapshot"],
                     self.unknown_actions),
                 "streams: %d" % len(self.streams),
                 "live set at the window's start (reconstructed, allocated at its start): %d "
                 "allocations, %d bytes (%d freed in the window, size from the free event; %d "
                 "still allocated at the snapshot, from its segments)" % (
                     self.reconstructed, self.reconstructed_bytes, self.reconstructed_freed,
                     self.reconstructed_live),
                 "allocations of live addresses (replaced): %d" % self.duplicate_allocs,
                 "frees of addresses already freed in the window (skipped): %d"
                 % self.double_frees,
                 "frees requested but not completed at the snapshot (left live): %d"
                 % self.pending_frees,
                 "allocations live at the end: %d (%d bytes)" % (self.live_at_end,
                                                                self.live_bytes_at_end)]
        if self.requested_at_snapshot is not None:
            same = self.live_bytes_at_end == self.requested_at_snapshot
            parts.append("snapshot's allocated blocks: %d requested bytes (%d rounded): %s" % (
                self.requested_at_snapshot, self.allocated_at_snapshot,
                "the trace's live bytes at its end equal them" if same else
                "MISMATCH with the trace's live bytes at its end (%d allocations live in the "
                "trace but not in the segments, %d of another size)" % (
                    self.not_in_segments, self.size_mismatches)))
        kind = ("exact, from the segment events and the snapshot's segments"
                if self.pytorch_peak_exact else "lower bound: from the segment events alone")
        parts.append("PyTorch reserved at the window's start: %d bytes (%s)%s" % (
            self.reserved_at_start, kind,
            ": a cold start, the window holds PyTorch's whole run" if self.cold_start else ""))
        parts.append("PyTorch peak reserved: %d bytes (%s)" % (self.pytorch_peak_reserved, kind))
        parts.append("allocation sites (innermost user frames): %d" % self.sites)
        return "\n".join(parts)


def _time_text(us):
    seconds, micro = divmod(int(us), 1000000)
    minutes, sec = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    return "%02d:%02d:%02d.%06d" % (hours, minute, sec, micro)


def _pick_device(traces, device):
    if device is None:
        return max(range(len(traces)), key=lambda d: (len(traces[d]), -d)) if traces else 0
    if device < 0 or device >= len(traces):
        raise SnapshotError("--device %d: the snapshot has traces for devices 0..%d"
                            % (device, len(traces) - 1))
    return device


_HELD = ("active_allocated", "active_pending_free")


def _snapshot_blocks(snap, device):
    """The device's segments at snapshot time: (reserved bytes, {address: block}) of its blocks
    held by the program (allocated, or freed and waiting for other streams), or None when the
    snapshot has no usable segment list."""
    segments = snap.get("segments")
    if not isinstance(segments, list) or not all(isinstance(s, dict) for s in segments):
        return None
    total = 0
    held = {}
    for s in segments:
        if s.get("device", device) != device or not isinstance(s.get("total_size"), int):
            continue
        total += s["total_size"]
        stream = s.get("stream", 0)
        for b in s.get("blocks") or []:
            if (isinstance(b, dict) and b.get("state") in _HELD and
                    isinstance(b.get("address"), int) and isinstance(b.get("size"), int)):
                requested = b.get("requested_size", b["size"])
                held[b["address"]] = (b["size"], requested if isinstance(requested, int)
                                      else b["size"], stream if isinstance(stream, int) else 0,
                                      b.get("frames"), b["state"] == "active_pending_free")
    return total, held


def _walk(r, events, device, sites):
    """Turns the device's events into rows; returns (rows, live, reconstructed) where live maps
    the addresses live at the end to [size, stream, free requested, site] and reconstructed
    lists the blocks freed in the window that were allocated before it."""
    live = {}
    reconstructed = []
    known = set()  # addresses allocated in the window or reconstructed: a later free needs an alloc
    reserved = 0
    rows = []
    ops = 0  # allocate and free rows so far (what the replay counts as operations)
    first_time = None
    for i, e in enumerate(events):
        if not isinstance(e, dict) or not isinstance(e.get("action"), str):
            raise SnapshotError("device %d, event %d: not an event (a dict with an 'action')"
                                % (device, i))
        r.events += 1
        action = e["action"]
        if action not in r.counts:
            r.unknown_actions += 1
            continue
        r.counts[action] += 1
        if action == "snapshot":
            continue
        t = e.get("time_us", i)
        time_us = t if isinstance(t, int) and not isinstance(t, bool) and t >= 0 else i
        if first_time is None:
            first_time = time_us
        time_us = max(0, time_us - first_time)  # PyTorch logs wall-clock microseconds
        size = _int_field(e, "size", i, device)
        stream = _int_field(e, "stream", i, device) if "stream" in e else 0
        r.streams.add(stream)
        if action in ("segment_alloc", "segment_map", "segment_free", "segment_unmap"):
            reserved += size if action in ("segment_alloc", "segment_map") else -size
            r.reserved_curve.append((ops, reserved))
            r.peak_reserved_delta = max(r.peak_reserved_delta, reserved)
            r.low_reserved_delta = min(r.low_reserved_delta, reserved)
            continue
        if action == "oom":
            rows.append((time_us, "allocate failure", 0, size, stream, sites.site(e.get("frames"))))
            continue
        addr = _int_field(e, "addr", i, device)
        if action == "alloc":
            if addr in live:
                r.duplicate_allocs += 1
            site = sites.site(e.get("frames"))
            live[addr] = [size, stream, False, site]
            known.add(addr)
            rows.append((time_us, "allocate", addr, size, stream, site))
            ops += 1
        elif action == "free_requested":
            if addr in live:
                live[addr][2] = True
        else:  # free_completed
            block = live.pop(addr, None)
            if block is None and addr in known:
                r.double_frees += 1  # freed twice with no alloc between: not a real snapshot's
                continue
            if block is None:
                # allocated before the window: its size is the free's (PyTorch records the
                # block's requested size); its frames are the free's, said in the site's text
                reconstructed.append((addr, size, stream, sites.site(e.get("frames"),
                                                                     "(freed at) ")))
                known.add(addr)
                rows.append((time_us, "free", addr, size, stream, 0))
                ops += 1
                continue
            rows.append((time_us, "free", addr, block[0], block[1], 0))
            ops += 1
    r.net_reserved = reserved
    return rows, live, reconstructed


def _reconstruct_live(r, live, reconstructed, snapshot, sites):
    """Adds to `reconstructed` the blocks the snapshot shows held that the window never
    allocated, and checks the trace's end against the snapshot's blocks."""
    total, held = snapshot
    r.segments_reserved = total
    r.allocated_at_snapshot = sum(b[0] for b in held.values())
    r.requested_at_snapshot = sum(b[1] for b in held.values())
    for addr in sorted(held):
        size, requested, stream, frames, pending = held[addr]
        if addr in live:
            r.size_mismatches += live[addr][0] != requested
            continue
        site = sites.site(frames)
        reconstructed.append((addr, requested, stream, site))
        live[addr] = [requested, stream, pending, site]
        r.reconstructed_live += 1
    r.not_in_segments = sum(1 for a in live if a not in held)


def convert(snap, device=None):
    """Converts a loaded snapshot (see load_snapshot); returns a ConversionResult whose
    ``lines`` are the CSV (header comments included). ``device``: the device whose trace to
    convert (default: the one with the most events).

    The live set when the recorded window began is reconstructed as allocations at the start
    of the trace (time 0, by address): the blocks the window frees without having allocated
    them, and the blocks the snapshot's segments show held at its end that the window never
    allocated. With them, the trace's live bytes at its end equal the requested bytes of the
    snapshot's allocated blocks."""
    traces = snap["device_traces"]
    if not traces or not any(traces):
        raise SnapshotError("the snapshot has no trace events: was _record_memory_history() "
                            "on before the snapshot?")
    device = _pick_device(traces, device)
    r = ConversionResult(device)
    sites = SiteTable()
    rows, live, reconstructed = _walk(r, traces[device], device, sites)
    r.reconstructed_freed = len(reconstructed)
    snapshot = _snapshot_blocks(snap, device)
    if snapshot is not None:
        _reconstruct_live(r, live, reconstructed, snapshot, sites)
    reconstructed.sort()
    r.reconstructed_bytes = sum(b[1] for b in reconstructed)
    r.pending_frees = sum(1 for b in live.values() if b[2])
    r.live_at_end = len(live)
    r.live_bytes_at_end = sum(b[0] for b in live.values())
    r.sites = len(sites.ids)
    start = r.reserved_at_start
    n = len(reconstructed)
    r.reserved_curve = [(0, start)] + [(n + op, start + delta) for op, delta in r.reserved_curve]
    with_sites = r.sites > 0
    header = "Thread,Time,Action,Pointer,Size,Stream" + (",Site" if with_sites else "")

    def line(t, action, p, size, stream, site):
        text = "1,%s,%s,%s,%d,0x%x" % (_time_text(t), action, "0x%x" % p if p else "(nil)",
                                        size, stream)
        return text + ("," + (str(site) if site else "") if with_sites else "")

    r.lines = r.header() + sites.lines() + [header]
    if reconstructed:
        r.lines.append("# reconstructed: the %d allocations below (%d bytes) were live when the "
                       "recorded window began" % (len(reconstructed), r.reconstructed_bytes))
        r.lines += [line(0, "allocate", a, size, stream, site)
                    for a, size, stream, site in reconstructed]
        r.lines.append("# the recorded window begins")
    r.lines += [line(*row) for row in rows]
    return r


def convert_file(snapshot_path, output_path, device=None):
    """Converts the snapshot at ``snapshot_path`` into ``output_path`` ("-": standard output);
    returns the ConversionResult. Raises SnapshotError for a bad snapshot, OSError when the
    output cannot be written."""
    result = convert(load_snapshot(snapshot_path), device)
    text = "\n".join(result.lines) + "\n"
    if output_path == "-":
        sys.stdout.write(text)
    else:
        with open(output_path, "w", encoding="ascii") as f:
            f.write(text)
    return result


def main(argv=None):
    """The command line; returns the exit status (0 ok, 2 bad input or arguments)."""
    p = argparse.ArgumentParser(
        prog="python -m cachalot.convert",
        description="Converts a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot) into "
                    "a trace that cachalot-replay replays, with PyTorch's reserved peak in its "
                    "header.")
    p.add_argument("snapshot", help="the snapshot pickle")
    p.add_argument("-o", "--output", required=True, help="the trace CSV to write (- : stdout)")
    p.add_argument("--device", type=int, default=None,
                   help="device whose events to convert (default: the one with most events)")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary on standard error")
    args = p.parse_args(argv)
    try:
        result = convert_file(args.snapshot, args.output, args.device)
    except SnapshotError as e:
        print("cachalot.convert: error: %s: %s" % (args.snapshot, e), file=sys.stderr)
        return 2
    except OSError as e:
        print("cachalot.convert: error: cannot write %s: %s" % (args.output, e.strerror or e),
              file=sys.stderr)
        return 2
    if not args.quiet:
        print(result.summary(), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
