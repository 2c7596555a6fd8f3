"""memory_stats() in the layout of torch.cuda.memory_stats(): exact keys and values after a
known sequence, on an allocator of one's own and on the default allocators; peaks reset;
empty_cache; the summary."""
from conftest import GiB, MiB, run_python

import cachalot

TORCH_POOL_KEYS = ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes",
                   "inactive_split_bytes", "allocation", "segment")
POOLS = ("all", "small_pool", "large_pool")
METRICS = ("current", "peak", "allocated", "freed")
COUNTERS = ("num_allocs", "num_frees", "num_segment_allocs", "num_segment_frees", "num_ooms",
            "num_alloc_retries", "num_cache_flushes", "num_device_syncs", "num_oversize_allocs",
            "num_deferred_frees", "num_pending_blocks", "num_streams", "num_free_blocks",
            "largest_free_block", "num_use_after_free_writes", "max_split_size",
            "num_chunk_maps", "num_chunk_unmaps", "device_timing", "device_ns", "device_calls",
            "device_syncs", "device_implied_syncs", "device_implied_sync_ns")
DEVICE_CALLS = ("segment_alloc", "segment_free", "range_reserve", "range_release",
                "chunk_create", "chunk_map", "chunk_access", "chunk_unmap", "chunk_release",
                "event_create", "event_record", "event_query", "event_sync", "stream_sync",
                "device_sync", "copy", "host_alloc", "host_free")
SLEEP = ("sleep_pools_asleep", "sleep_bytes_asleep", "sleep_bytes_offloaded", "sleep_bytes_held",
         "sleep_num_sleeps", "sleep_num_pressure_sleeps", "sleep_num_wakes",
         "sleep_num_failed_sleeps", "sleep_num_failed_wakes", "sleep_ns", "wake_ns",
         "sleep_bytes_slept", "sleep_bytes_woken", "sleep_bytes_copied_out",
         "sleep_bytes_copied_in")


def expected_keys():
    keys = {f"{k}.{p}.{m}" for k in TORCH_POOL_KEYS for p in POOLS for m in METRICS}
    keys |= {"num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free",
             "max_split_size"}
    keys |= {f"cachalot.{c}" for c in COUNTERS}
    keys |= {f"cachalot.call_{k}.{m}" for k in DEVICE_CALLS for m in ("calls", "ns")}
    keys |= {"cachalot.num_gc_syncs"}
    keys |= {f"cachalot.{f}" for f in SLEEP}
    return keys


def stat(d, key, pool, current, peak, allocated, freed):
    got = tuple(d[f"{key}.{pool}.{m}"] for m in METRICS)
    assert got == (current, peak, allocated, freed), (key, pool, got)


def known_sequence(malloc, free):
    """1000 B (small pool) allocated and freed, 3 MiB (large pool) live, then an impossible
    2 GiB request on a 1 GiB device."""
    small = malloc(1000)
    large = malloc(3 * MiB)
    free(small)
    try:
        malloc(2 * GiB)
    except cachalot.OutOfMemoryError:
        pass
    else:
        raise AssertionError("2 GiB on a 1 GiB device succeeded")
    return large


def check_known_sequence(d):
    assert set(d) == expected_keys()
    assert list(d) == sorted(d), "sorted like torch.cuda.memory_stats()"
    stat(d, "requested_bytes", "small_pool", 0, 1000, 1000, 1000)
    stat(d, "requested_bytes", "large_pool", 3 * MiB, 3 * MiB, 3 * MiB, 0)
    stat(d, "allocated_bytes", "all", 3 * MiB, 3 * MiB + 1024, 3 * MiB + 1024, 1024)
    stat(d, "allocated_bytes", "small_pool", 0, 1024, 1024, 1024)
    stat(d, "active_bytes", "all", 3 * MiB, 3 * MiB + 1024, 3 * MiB + 1024, 1024)
    stat(d, "reserved_bytes", "small_pool", 2 * MiB, 2 * MiB, 2 * MiB, 0)
    stat(d, "reserved_bytes", "large_pool", 20 * MiB, 20 * MiB, 20 * MiB, 0)
    stat(d, "inactive_split_bytes", "large_pool", 17 * MiB, 17 * MiB, 17 * MiB, 0)
    stat(d, "allocation", "all", 1, 2, 2, 1)
    stat(d, "allocation", "large_pool", 1, 1, 1, 0)
    stat(d, "segment", "all", 2, 2, 2, 0)
    assert d["num_ooms"] == 1
    assert d["num_alloc_retries"] == 0  # impossible sizes fail before any retry
    assert d["num_device_alloc"] == 2
    assert d["num_device_free"] == 0
    assert d["max_split_size"] == 32 * MiB  # cachalot's default (PyTorch's is none: -1)
    assert d["cachalot.max_split_size"] == 32 * MiB
    assert d["cachalot.num_allocs"] == 2
    assert d["cachalot.num_frees"] == 1
    assert d["cachalot.largest_free_block"] == 17 * MiB
    assert d["cachalot.num_streams"] == 1


def test_exact_stats_of_an_allocator(allocator):
    known_sequence(allocator.malloc, allocator.free)
    check_known_sequence(allocator.memory_stats())


def test_peak_reset_and_empty_cache(allocator):
    large = known_sequence(allocator.malloc, allocator.free)
    allocator.reset_peak_memory_stats()
    d = allocator.memory_stats()
    stat(d, "allocated_bytes", "all", 3 * MiB, 3 * MiB, 3 * MiB + 1024, 1024)
    allocator.free(large)
    allocator.empty_cache()
    d = allocator.memory_stats()
    stat(d, "reserved_bytes", "all", 0, 22 * MiB, 22 * MiB, 22 * MiB)
    assert d["num_device_free"] == 2
    assert d["cachalot.num_cache_flushes"] == 1
    summary = allocator.memory_summary()
    assert "cachalot memory summary: device 0, served by the simulated backend" in summary
    assert "Reserved memory" in summary


def test_exact_stats_of_the_default_allocator():
    run_python("""
        import ctypes, cachalot
        from cachalot import _lib
        from test_stats import check_known_sequence, known_sequence
        lib = _lib.load()
        def malloc(size):
            out = ctypes.c_void_p()
            _lib.check(lib.cachalot_default_malloc(0, ctypes.byref(out), size, None))
            return out.value
        def free(ptr):
            _lib.check(lib.cachalot_default_free(0, ptr, 0, None))
        large = known_sequence(malloc, free)
        check_known_sequence(cachalot.memory_stats())
        check_known_sequence(cachalot.memory_stats(0))
        cachalot.reset_peak_memory_stats(0)
        assert cachalot.memory_stats()["allocated_bytes.all.peak"] == 3 << 20
        free(large)
        cachalot.empty_cache()
        assert cachalot.memory_stats()["reserved_bytes.all.current"] == 0
        assert "device 0, served by the simulated backend" in cachalot.memory_summary()
    """, CACHALOT_LOG="off")
