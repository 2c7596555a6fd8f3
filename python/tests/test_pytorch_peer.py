"""cachalot-pytorch-replay: PyTorch's own CUDA caching allocator (c10, built from PyTorch's source
by tools/pytorch_peer against the host-only CUDA stand-in) replaying a trace. Skipped unless the
build was pointed at a PyTorch source tree (-DCACHALOT_PYTORCH_SOURCE). The expected figures
follow PyTorch 2.6's c10/cuda/CUDACachingAllocator.cpp: requests round up to 512 B; at most 1 MiB
comes from a 2 MiB small segment, under 10 MiB from a 20 MiB segment, larger ones from a segment
rounded up to 2 MiB; expandable segments map 2 MiB (small) and 20 MiB (large) pages."""
import subprocess

import pytest

from cachalot import _replaytools as rt

MiB = 1 << 20
TRACE = """Thread,Time,Action,Pointer,Size,Stream
1,00:00:00.000001,allocate,0x1000,1000,0x0
1,00:00:00.000002,allocate,0x2000,3000000,0x0
1,00:00:00.000003,allocate,0x3000,31457281,0x0
1,00:00:00.000004,free,0x1000,1000,0x0
1,00:00:00.000005,free,0x2000,3000000,0x0
1,00:00:00.000006,free,0x3000,31457281,0x0
"""


@pytest.fixture
def tool(pytorch_tool):
    return pytorch_tool


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(TRACE)
    return str(path)


def test_segments_follow_pytorchs_rounding(tool, trace):
    f = rt.pytorch_run(tool, trace, 80 << 30)
    assert f.complete and f.doc["pytorch_version"].startswith("2.")
    # 1000 B: a 2 MiB small segment; 3,000,000 B: a 20 MiB one; 30 MiB + 1: 32 MiB
    assert f.doc["segment_sizes"] == [2 * MiB, 20 * MiB, 32 * MiB]
    assert f.peak_reserved == f.doc["end_reserved_bytes"] == 54 * MiB  # cached, never freed
    assert f.doc["peak_requested_bytes"] == 1000 + 3000000 + 31457281
    assert f.doc["peak_allocated_bytes"] == 1024 + 3000320 + 31457792
    assert f.device_calls == 3 and f.syncs == 0
    assert f.device_ms is not None and f.device_ms > 0  # priced by cachalot's cost model


def test_expandable_segments_map_pages(tool, trace):
    f = rt.pytorch_run(tool, trace, 80 << 30, expandable=True)
    calls = f.doc["calls"]
    assert f.doc["segment_sizes"] == [] and calls["cuMemAddressReserve"] == 2  # small, large
    # one 2 MiB page for the small pool, two 20 MiB pages for 3000320 + 31457792 bytes
    assert calls["cuMemCreate"] == calls["cuMemMap"] == 3
    assert f.peak_reserved == 42 * MiB
    assert f.device_calls == 5  # the two ranges count, as cachalot's do (segment_allocs)


def test_capacity_is_enforced(tool, trace):
    f = rt.pytorch_run(tool, trace, 40 * MiB)
    assert not f.complete and f.ooms == 1 and f.doc["skipped_frees"] == 1
    # cudaMalloc, then again after releasing the cache (nothing to release)
    assert f.doc["calls"]["cudaMalloc_failed"] == 2
    assert rt.pytorch_run(tool, trace, 40 * MiB, stop_at_oom=True).doc["stopped"] is True
    smallest, probes = rt.smallest_capacity(
        lambda c: rt.pytorch_run(tool, trace, c, False, True).complete, 34458112)
    assert smallest == 54 * MiB and probes > 1


def test_bad_arguments_exit_2(tool, trace, tmp_path):
    for args in (["--capacity", "lots", trace], ["--cost", "bogus:1", trace], [trace, trace],
                 [str(tmp_path / "missing.csv")]):
        p = subprocess.run([tool, *args], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert p.stderr.startswith("cachalot-pytorch-replay: "), p.stderr
