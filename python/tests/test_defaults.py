"""The default allocators seen from Python: configured before first use (and refusing another
config after), reading stats, summary or snapshot before first use creates nothing, never on
the simulated device unless asked (on this machine without a GPU driver: a BackendError naming
the cause, printed once on stderr), a bad CACHALOT_CONF named, memory fractions, and the
logger's levels."""
import textwrap

from conftest import run_python

# Creates the default allocator of device `d` (one allocation and its free).
CREATE = """
import ctypes
from cachalot import _lib
def create(d=0):
    out = ctypes.c_void_p()
    _lib.check(_lib.load().cachalot_default_malloc(d, ctypes.byref(out), 64, None))
    _lib.check(_lib.load().cachalot_default_free(d, out, 64, None))
"""


def test_configure_before_first_use():
    run_python(CREATE + textwrap.dedent("""
        import pytest, cachalot
        with pytest.raises(cachalot.InvalidArgumentError, match="bogus_key"):
            cachalot.configure("bogus_key:1")
        cachalot.configure("backend:simulated,capacity:2GiB")
        cachalot.configure("backend:simulated,capacity:2GiB")   # the same again: fine
        create(0)
        assert "device 0, served by the simulated backend" in cachalot.memory_summary()
        with pytest.raises(cachalot.InvalidArgumentError, match="exists already"):
            cachalot.configure("backend:simulated,capacity:4GiB")
        with pytest.raises(cachalot.InvalidArgumentError, match="exists already"):
            cachalot.configure(None)  # CACHALOT_CONF (1 GiB) differs from the config in use
        from cachalot import _lib
        import ctypes
        out = ctypes.c_void_p()
        st = _lib.load().cachalot_default_malloc(0, ctypes.byref(out), 1536 << 20, None)
        assert st == _lib.SUCCESS, "the configured 2 GiB device, not CACHALOT_CONF's 1 GiB"
    """))


def test_reading_before_first_use_creates_nothing():
    run_python(CREATE + """
import pytest, cachalot
from cachalot import _lib
lib = _lib.load()
stats = cachalot.memory_stats()
assert stats["allocated_bytes.all.current"] == 0 and stats["num_device_alloc"] == 0, stats
assert stats["reserved_bytes.large_pool.peak"] == 0 and stats["cachalot.num_allocs"] == 0
assert "no default allocator yet" in cachalot.memory_summary(1)
assert cachalot.memory_snapshot(2) == [] and cachalot.memory_snapshot() == []
cachalot.reset_peak_memory_stats()
cachalot.empty_cache()
assert not any(lib.cachalot_default_exists(d) for d in range(4)), "nothing was created"
# So the config can still be chosen (test_torch.py: through cachalot.torch.enable(conf=...)).
cachalot.configure("backend:simulated,capacity:4GiB")
create(0)
assert "4.00 GiB device memory" in cachalot.memory_summary()
assert cachalot.memory_stats()["num_device_alloc"] == 1
""")


def test_memory_fraction_before_creation_only():
    run_python("""
        import ctypes, pytest, cachalot
        from cachalot import _lib
        cachalot.set_memory_fraction(0.5, device=1)
        out = ctypes.c_void_p()
        st = _lib.load().cachalot_default_malloc(1, ctypes.byref(out), 600 << 20, None)
        assert st == _lib.OUT_OF_MEMORY, st  # 512 MiB of the 1 GiB simulated device
        with pytest.raises(cachalot.NotSupportedError, match="before its first allocation"):
            cachalot.set_memory_fraction(0.25, device=1)
        with pytest.raises(cachalot.InvalidArgumentError):
            cachalot.set_memory_fraction(2.0, device=3)
    """, CACHALOT_LOG="off")


def test_no_silent_simulated_device():
    proc = run_python("""
        import ctypes, pytest, cachalot
        from cachalot import _lib
        lib = _lib.load()
        out = ctypes.c_void_p()
        st = lib.cachalot_default_malloc(0, ctypes.byref(out), 1024, None)
        if st == _lib.SUCCESS:   # a machine with a GPU: CUDA serves
            assert '"backend":"cuda"' in _lib.read_text(lib.cachalot_default_memory_snapshot, 0)
            print("cuda")
        else:
            assert cachalot.memory_stats()["num_ooms"] == 0  # zeros: nothing created yet
            with pytest.raises((cachalot.BackendError, cachalot.NotSupportedError),
                               match="never fall back to the simulated device"):
                _lib.check(st)
            assert lib.cachalot_torch_malloc(1024, 0, None) is None
            assert not lib.cachalot_default_exists(0)
            print("refused")
    """, conf=None)
    if proc.stdout.strip() == "refused":
        assert proc.stderr.count("cannot start on CUDA") == 1, proc.stderr
        assert proc.stderr.startswith("cachalot [error] "), proc.stderr


def test_bad_config_is_named_once_on_stderr():
    proc = run_python("""
        import pytest, cachalot
        for _ in range(3):
            with pytest.raises(cachalot.InvalidArgumentError, match="memory_limt"):
                cachalot.memory_stats()
        with pytest.raises(cachalot.InvalidArgumentError, match="memory_limt"):
            cachalot.configure(None)
    """, conf="memory_limt:90%")
    assert proc.stderr.count("memory_limt") == 1, proc.stderr


def test_log_levels():
    proc = run_python(CREATE + "create(1)", CACHALOT_LOG="info")
    assert "cachalot [info] default allocator of device 1: backend simulated" in proc.stderr
    assert "cachalot [warn] the default allocators run on the SIMULATED device" in proc.stderr
    proc = run_python(CREATE + "create(1)", CACHALOT_LOG="off")
    assert proc.stderr == ""
    proc = run_python(CREATE + "create(1)", CACHALOT_LOG="loud")
    assert "CACHALOT_LOG='loud' is not one of off, error, warn, info, debug" in proc.stderr
