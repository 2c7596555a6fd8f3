"""The code that made an allocation, from a PyTorch snapshot's stack frames.

A snapshot taken with ``_record_memory_history(context="all")`` (the default) gives each event
and each allocated block a list of ``frames`` (dicts with ``filename``, ``line``, ``name``),
innermost first, C++ and Python mixed (torch/csrc/profiler/combined_traceback.cpp). The frame
worth naming is the innermost one in the user's own Python code: not C/C++, not the standard
library, not an installed package (torch itself, einops, ...). Without such a frame the
innermost Python frame is taken. Without any Python frame (the autograd engine's threads run
the backward pass in C++), the innermost autograd node names the code: its ``apply`` frame,
e.g. ``torch::autograd::generated::DivBackward0::apply``, becomes ``(autograd) DivBackward0``.
Otherwise there is none.
"""
import re

__all__ = ["user_frame", "site_text", "SiteTable"]

_LIBRARY_MARKERS = ("/site-packages/", "/dist-packages/", "/lib/python3", "/lib64/python3")


def _is_python(filename):
    return filename.endswith(".py")


def _is_library(filename):
    return filename.startswith("<") or any(m in filename for m in _LIBRARY_MARKERS)


_AUTOGRAD_NODE = re.compile(r"torch::autograd::generated::(\w+)::apply\(")


def user_frame(frames):
    """The innermost user frame of ``frames`` (see the module comment), or None."""
    if not isinstance(frames, list):
        return None
    frames = [f for f in frames if isinstance(f, dict) and isinstance(f.get("filename"), str)]
    python = [f for f in frames if _is_python(f["filename"])]
    for f in python:
        if not _is_library(f["filename"]):
            return f
    if python:
        return python[0]
    for f in frames:
        m = _AUTOGRAD_NODE.search(str(f.get("name", "")))
        if m:
            return {"autograd": m.group(1)}
    return None


def site_text(frame):
    """``file:line function`` of a frame (one line: control characters become spaces)."""
    if "autograd" in frame:
        return "(autograd) %s" % frame["autograd"]
    line = frame.get("line")
    text = "%s:%s %s" % (frame.get("filename"), line if isinstance(line, int) else "?",
                         frame.get("name", "?"))
    return "".join(c if c >= " " else " " for c in text)


class SiteTable:
    """Numbers the distinct sites of a trace from 1 (0: none), in order of first use."""

    def __init__(self):
        self.ids = {}

    def site(self, frames, prefix=""):
        """The id of the user frame of ``frames`` (with ``prefix`` before its text), 0 if none."""
        frame = user_frame(frames)
        if frame is None:
            return 0
        text = prefix + site_text(frame)
        return self.ids.setdefault(text, len(self.ids) + 1)

    def lines(self):
        """The ``# site N: TEXT`` comment lines."""
        return ["# site %d: %s" % (i, text) for text, i in self.ids.items()]
