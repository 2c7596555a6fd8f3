"""Saved figures of PyTorch's caching allocator (cachalot-pytorch-replay, tools/pytorch_peer) on
converted traces, so that a table comparing cachalot with it is regenerated without building or
running PyTorch's allocator again: its figures depend on the trace, the GPU's size, the search
granule, PyTorch's version and the cost model that prices its calls, never on cachalot's engine.

A file is one JSON object:

  {"format": FORMAT, "pytorch_version": "2.6.0", "capacity_bytes": N, "granule_bytes": N,
   "cost_model": "cost_model:on,cost_segment_alloc:50us+1ms/GiB,...", "measured": "...",
   "measured_with": {...}, "snapshots": {"NAME.pickle": {"trace_sha256": HEX, "rows": {
   "PyTorch": {...}, "PyTorch expandable": {...}}}}}

Invariants: one PyTorch version and one cost model (every key, as both replay tools print it in
their JSON) per file, taken from the rows themselves; rows are handed back only for the trace
they were measured on (its SHA-256), at the same capacity and granule, for the same cost model
as the cachalot replay they are set beside. Anything else raises StaleFigures naming the
snapshot and what differs: a stale file is refused, never half used.
"""
import hashlib
import json

__all__ = ["FORMAT", "FiguresError", "StaleFigures", "PeerFigures", "trace_sha256"]

FORMAT = "cachalot-pytorch-figures/1"


class FiguresError(ValueError):
    """A figures file cannot be read or written (the message names the file and why)."""


class StaleFigures(FiguresError):
    """The saved figures are not those of this trace, capacity, granule or cost model."""


def trace_sha256(path):
    """The SHA-256 (hex) of a trace file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class PeerFigures:
    """The PyTorch rows of one table: measured and saved, or loaded and checked."""

    def __init__(self, capacity, granule, measured="", measured_with=None, path=None):
        self.doc = {"format": FORMAT, "pytorch_version": None, "capacity_bytes": capacity,
                    "granule_bytes": granule, "cost_model": None, "measured": measured,
                    "measured_with": measured_with or {}, "snapshots": {}}
        self.path = path

    @property
    def version(self):
        """PyTorch's version, as its replay tool printed it (None before the first rows)."""
        return self.doc["pytorch_version"]

    def add(self, snapshot, trace_hash, rows):
        """Records `rows` ({allocator: row with its replay's JSON as "doc"}) for `snapshot`."""
        for name, row in rows.items():
            doc = row.get("doc") or {}
            for key in ("pytorch_version", "cost_model"):
                value = doc.get(key)
                if not value:
                    raise FiguresError("%s, %s: the replay's JSON has no %s (a "
                                       "cachalot-pytorch-replay older than the figures file)"
                                       % (snapshot, name, key))
                if self.doc[key] is None:
                    self.doc[key] = value
                elif self.doc[key] != value:
                    raise FiguresError("%s, %s: %s %r, where the file's other rows have %r" % (
                        snapshot, name, key, value, self.doc[key]))
        self.doc["snapshots"][snapshot] = {"trace_sha256": trace_hash, "rows": rows}

    def save(self, path):
        """Writes the file (the whole table's rows, in one go)."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.doc, f, indent=1, sort_keys=True)
            f.write("\n")
        self.path = path

    @classmethod
    def load(cls, path):
        """Reads a file written by save(). @raises FiguresError naming what is wrong"""
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            raise FiguresError("%s: cannot read PyTorch's figures (%s)" % (path, e)) from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise FiguresError("%s: not a PyTorch figures file of format %s (format %r)" % (
                path, FORMAT, doc.get("format") if isinstance(doc, dict) else None))
        for key, kind in (("pytorch_version", str), ("capacity_bytes", int),
                          ("granule_bytes", int), ("cost_model", str), ("snapshots", dict)):
            if not isinstance(doc.get(key), kind):
                raise FiguresError("%s: %s is missing or not a %s" % (path, key, kind.__name__))
        figures = cls(doc["capacity_bytes"], doc["granule_bytes"], path=path)
        figures.doc = doc
        return figures

    def rows_for(self, snapshot, trace_hash, capacity, granule, cost_model):
        """The saved rows of `snapshot`, if measured on the trace with this hash, at this
        capacity and granule, with this cost model. @raises StaleFigures saying what differs"""
        where = self.path or "the figures"
        again = "; measure them again with --pytorch-replay"
        if self.doc["capacity_bytes"] != capacity or self.doc["granule_bytes"] != granule:
            raise StaleFigures("%s: measured at a capacity of %d B with a %d B granule, not %d B "
                               "and %d B%s" % (where, self.doc["capacity_bytes"],
                                               self.doc["granule_bytes"], capacity, granule,
                                               again))
        entry = self.doc["snapshots"].get(snapshot)
        if entry is None:
            raise StaleFigures("%s: no figures for %s%s" % (where, snapshot, again))
        if entry.get("trace_sha256") != trace_hash:
            raise StaleFigures("%s: %s's trace has changed since its figures were measured "
                               "(SHA-256 %s, now %s: the snapshot or its conversion differs)%s"
                               % (where, snapshot, entry.get("trace_sha256"), trace_hash, again))
        if self.doc["cost_model"] != cost_model:
            raise StaleFigures("%s: PyTorch's calls were priced by another cost model than "
                               "cachalot-replay's (%s, now %s)%s" % (
                                   where, self.doc["cost_model"], cost_model, again))
        return entry["rows"]
