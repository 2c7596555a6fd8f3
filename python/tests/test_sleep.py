"""Allocator.sleep / wake / asleep() on the host-backed simulated device: a pool's bytes come
back at the same addresses after an offload, PoolAsleepError while asleep, the sleep counters in
memory_stats()/pool_stats(), refusals as typed errors, and a sleepable pool put to sleep for a
higher-priority one with its Python callback asked and told."""
import ctypes

import pytest

import cachalot

MiB = 1 << 20
CONF = "backend:simulated,capacity:64MiB,host_backing:1,expandable_segments:1"


def test_context_manager_round_trip_keeps_the_bytes():
    with cachalot.Allocator(CONF) as a:
        batch = a.create_pool("batch")
        p = a.pool_malloc(batch, 3 * MiB, stream=0)
        ctypes.memset(p, 0x5A, 3 * MiB)
        with a.asleep(batch, "offload") as s:
            assert s.slept
            assert a.is_asleep(batch)
            st = a.pool_stats(batch)
            assert st["reserved_bytes.all.current"] == 0
            assert st["allocated_bytes.all.current"] == 3 * MiB
            assert st["cachalot.sleep_bytes_offloaded"] == 3 * MiB
            assert st["cachalot.sleep_num_sleeps"] == 1
            assert st["cachalot.sleep_ns"] > 0
            with pytest.raises(cachalot.PoolAsleepError, match="'batch'"):
                a.pool_malloc(batch, 1000)
            assert a.memory_stats()["cachalot.sleep_pools_asleep"] == 1
        assert not a.is_asleep(batch)
        assert ctypes.string_at(p, 3 * MiB) == b"\x5a" * (3 * MiB)
        assert a.pool_stats(batch)["cachalot.sleep_num_wakes"] == 1
        assert "Pool 1 sleep: awake; sleeps 1" in a.memory_summary()
        a.free(p)


def test_refusals_are_typed_errors():
    with cachalot.Allocator(CONF) as a:
        with pytest.raises(cachalot.InvalidArgumentError, match="default pool"):
            a.sleep(0)
        t = a.create_pool("t")
        with pytest.raises(cachalot.InvalidArgumentError, match="unknown sleep mode"):
            a.sleep(t, "nap")
        assert a.sleep(t, "discard") and not a.sleep(t, "discard")
        assert a.wake(t) and not a.wake(t)
    with cachalot.Allocator("backend:simulated,capacity:64MiB") as fixed:
        f = fixed.create_pool("f")
        with pytest.raises(cachalot.NotSupportedError, match="expandable_segments"):
            fixed.sleep(f)


def test_sleepable_pool_sleeps_for_a_higher_priority_one():
    told = []

    def on_sleep(pool, notice, nbytes):
        told.append(notice)
        return True

    with cachalot.Allocator(CONF) as a:
        batch = a.create_pool("batch", priority=0, sleepable=True, on_sleep=on_sleep)
        critical = a.create_pool("critical", priority=10)
        w = a.pool_malloc(batch, 40 * MiB, stream=16)
        spike = a.pool_malloc(critical, 30 * MiB, stream=32)
        assert told == ["requested", "asleep"]
        assert a.pool_stats(batch)["cachalot.sleep_num_pressure_sleeps"] == 1
        a.free(spike, stream=32)
        a.empty_cache()
        assert a.wake(batch)
        a.free(w, stream=16)
