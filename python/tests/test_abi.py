"""The package's ctypes view of the C API matches cachalot.h and the library: the stats structs
field for field (names, order, nested types), the size the library says it filled, and every
entry point the package types exists in libcachalot.so."""
import ctypes
import os
import re

import pytest

import cachalot
from cachalot import _lib

HEADER = os.path.join(os.path.dirname(__file__), "..", "..", "include", "cachalot", "cachalot.h")

_C_TO_CTYPES = {"uint64_t": ctypes.c_uint64, "cachalot_stat": _lib.Stat,
                "cachalot_pool_stats": _lib.PoolStats, "cachalot_device_call": _lib.DeviceCall}


def header_fields(struct):
    """[(name, C type)] of `typedef struct <struct> {...} <struct>;` in cachalot.h."""
    text = open(HEADER).read()
    body = re.search(r"typedef struct %s \{(.*?)\} %s;" % (struct, struct), text, re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    return [(name, ctype) for ctype, name in re.findall(r"(\w+)\s+(\w+);", body)]


def test_structs_match_the_header_field_for_field():
    for struct, mirror in (("cachalot_stat", _lib.Stat), ("cachalot_pool_stats", _lib.PoolStats),
                           ("cachalot_device_call", _lib.DeviceCall),
                           ("cachalot_stats", _lib.Stats)):
        c_fields = header_fields(struct)
        py_fields = [(name, ctype) for name, ctype in mirror._fields_]
        assert [n for n, _ in c_fields] == [n for n, _ in py_fields], struct
        for (name, ctype), (_, pytype) in zip(c_fields, py_fields):
            assert _C_TO_CTYPES[ctype] is pytype, f"{struct}.{name}: {ctype} vs {pytype}"


def test_the_library_fills_exactly_the_mirror():
    # A longer buffer than the mirror: the library writes back the size it knows.
    class Longer(ctypes.Structure):
        _fields_ = [("known", _lib.Stats), ("future", ctypes.c_uint64 * 4)]

    buf = Longer()
    buf.known.size = ctypes.sizeof(buf)
    for i in range(4):
        buf.future[i] = 0xDEADBEEF
    with cachalot.Allocator("backend:simulated,capacity:1GiB") as a:
        _lib.check(_lib.load().cachalot_get_stats(a._h(), ctypes.byref(buf.known)))
    assert buf.known.size == ctypes.sizeof(_lib.Stats)
    assert list(buf.future) == [0xDEADBEEF] * 4


def test_an_older_mirror_gets_its_prefix():
    s = _lib.Stats()
    s.size = _lib.Stats.reserved_bytes.offset  # as if built when the struct ended there
    s.num_allocs = 77
    with cachalot.Allocator("backend:simulated,capacity:1GiB") as a:
        a.malloc(4096)
        _lib.check(_lib.load().cachalot_get_stats(a._h(), ctypes.byref(s)))
    assert s.size == _lib.Stats.reserved_bytes.offset
    assert s.allocated_bytes.all.current == 4096
    assert s.num_allocs == 77  # untouched
    assert s.filled("allocated_bytes") and not s.filled("reserved_bytes")
    d = cachalot._stats.to_dict(s)
    assert "allocated_bytes.all.current" in d and "reserved_bytes.all.current" not in d


def test_every_typed_entry_point_is_exported():
    lib = _lib.load()
    for name in _lib._PROTOTYPES:
        assert _lib.address(name), name
    assert lib.cachalot_status_string(_lib.NOT_SUPPORTED) == b"CACHALOT_ERROR_NOT_SUPPORTED"


def test_errors_map_to_python_exceptions(allocator):
    with pytest.raises(cachalot.InvalidPointerError, match="not a live allocation of this allocator") as e:
        allocator.free(12345)
    assert e.value.status == _lib.INVALID_POINTER
    with pytest.raises(cachalot.OutOfMemoryError, match="out of memory") as e:
        allocator.malloc(2 << 30)
    assert isinstance(e.value, MemoryError)
    with pytest.raises(cachalot.InvalidArgumentError, match="memory_limt") as e:
        cachalot.Allocator("memory_limt:90%")
    assert isinstance(e.value, ValueError)
    allocator.close()
    with pytest.raises(cachalot.InvalidArgumentError, match="closed"):
        allocator.malloc(16)
