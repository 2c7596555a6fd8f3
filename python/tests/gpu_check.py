#!/usr/bin/env python3
"""The GPU checks of the Python package (issue 8's list), run by scripts/gpu-check.sh:

    python python/tests/gpu_check.py torch|cupy|all

torch: cachalot.torch.enable() (building the extension), a training step and an inference loop
through it, an allocation larger than the device raising torch.cuda.OutOfMemoryError with the
process going on, Tensor.record_stream on a side stream deferring reuse, torch.cuda.empty_cache
returning memory (torch.cuda.mem_get_info), set_per_process_memory_fraction and graph capture
refusing loudly, the statistics and snapshot of the package, and a tenant pool
(cachalot.torch.tenant) sleeping with offload and waking with its tensor and a graph intact
(in a child interpreter with expandable_segments:1). cupy: cachalot.cupy.enable(), array work
on the default and a non-blocking stream, cupy.cuda.memory.OutOfMemoryError.
Each part runs in its own interpreter. Prints one PASS/FAIL line per check; exits 0 when all
passed, 1 when one failed, 77 when the part cannot run here (no framework or no GPU).
Needs the package importable (PYTHONPATH=python with CACHALOT_LIBRARY=..., or installed).
"""
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback

SKIP = 77
FAILED = []


def check(name, fn):
    t0 = time.time()
    try:
        detail = fn()
        print(f"PASS {name} ({time.time() - t0:.1f} s){': ' + detail if detail else ''}",
              flush=True)
    except Exception:  # noqa: BLE001 -- report every failure and go on
        FAILED.append(name)
        print(f"FAIL {name} ({time.time() - t0:.1f} s)\n{traceback.format_exc()}", flush=True)


def torch_part():
    try:
        import torch
    except ImportError:
        print("skipped: torch is not installed")
        return SKIP
    if not torch.cuda.is_available():
        print("skipped: no CUDA device visible to torch")
        return SKIP
    import cachalot
    import cachalot.torch as ct
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), library {cachalot.library_path()}")

    check("enable() builds the extension and installs cachalot",
          lambda: (ct.enable(verbose=False), " ".join(ct.wired_hooks()))[1])
    if FAILED:
        return 1
    device = torch.cuda.current_device()

    def training_step():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                    torch.nn.Linear(4096, 10)).cuda()
        opt = torch.optim.AdamW(model.parameters())
        for _ in range(5):
            x = torch.randn(512, 1024, device="cuda")
            y = torch.randint(0, 10, (512,), device="cuda")
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        torch.cuda.synchronize()
        s = ct.memory_stats()
        assert s["cachalot.num_allocs"] > 0 and s["allocated_bytes.all.current"] > 0, s
        return f"loss {loss.item():.3f}, {s['cachalot.num_allocs']} allocations"

    def inference_loop():
        model = torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.GELU(),
                                    torch.nn.Linear(2048, 2048)).cuda().half().eval()
        before = ct.memory_stats()["num_device_alloc"]
        with torch.no_grad():
            for i in range(200):
                x = torch.randn(1 + (i * 37) % 256, 2048, device="cuda", dtype=torch.half)
                model(x).sum().item()
        after = ct.memory_stats()
        return (f"{after['num_device_alloc'] - before} segment allocations in 200 steps, "
                f"{after['reserved_bytes.all.current'] >> 20} MiB reserved")

    def out_of_memory_then_go_on():
        free, total = torch.cuda.mem_get_info()
        try:
            torch.empty(total * 2, dtype=torch.uint8, device="cuda")
        except torch.cuda.OutOfMemoryError as e:
            message = str(e)
        else:
            raise AssertionError("no out-of-memory error")
        assert "cachalot" in message and "out of memory" in message, message
        x = torch.ones(1 << 20, device="cuda")
        assert float(x.sum()) == float(1 << 20)
        assert ct.memory_stats()["num_ooms"] >= 1
        return message.splitlines()[0][:120]

    def record_stream_defers_reuse():
        side = torch.cuda.Stream()
        x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
        old = x.data_ptr()
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(500_000_000)  # keeps the side stream busy (cycles)
            x.add_(1)
        x.record_stream(side)
        del x
        pending = ct.memory_stats()["cachalot.num_pending_blocks"]
        y = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
        reused_early = y.data_ptr() == old
        side.synchronize()
        del y
        assert pending >= 1, "the freed block does not wait for the side stream"
        assert not reused_early, "the block was reused while the side stream still used it"
        return f"{pending} pending block(s) while the side stream ran"

    def empty_cache_returns_memory():
        x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
        del x
        torch.cuda.synchronize()
        free_before, _ = torch.cuda.mem_get_info()
        reserved_before = ct.memory_reserved()
        torch.cuda.empty_cache()
        free_after, _ = torch.cuda.mem_get_info()
        assert ct.memory_reserved() < reserved_before
        assert free_after - free_before >= (1 << 30) * 9 // 10, (free_before, free_after)
        return f"{(free_after - free_before) >> 20} MiB returned to the device"

    def memory_fraction_after_first_use_is_loud():
        try:
            torch.cuda.set_per_process_memory_fraction(0.5, device)
        except RuntimeError as e:
            assert "before its first allocation" in str(e), str(e)
            return str(e).splitlines()[0][:120]
        raise AssertionError("no error")

    def graph_capture_through_a_private_pool():
        # A cold capture (nothing cached for it): the graph pool grows during the capture.
        static_in = torch.ones(1 << 20, device="cuda")
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            tmp = static_in * 2
            out = tmp + 1
            del tmp  # freed during the capture: reusable by the capture only
        g.replay()
        torch.cuda.synchronize()
        assert float(out[0]) == 3.0, float(out[0])
        static_in.fill_(2.0)
        g.replay()
        torch.cuda.synchronize()
        assert float(out[0]) == 5.0, float(out[0])
        lo, hi = out.data_ptr(), out.data_ptr() + out.numel() * out.element_size()
        eager = [torch.empty(1 << 20, device="cuda") for _ in range(4)]
        assert all(not (lo <= e.data_ptr() < hi) for e in eager), "eager work got a pool block"
        del eager, g, out
        torch.cuda.synchronize()
        return "cold capture grew the pool, two replays correct, eager work kept out"

    def stats_and_snapshot():
        s = ct.memory_stats()
        for key in ("allocated_bytes.all.current", "reserved_bytes.large_pool.peak",
                    "num_device_alloc", "cachalot.num_streams"):
            assert key in s, key
        assert ct.memory_allocated() == s["allocated_bytes.all.current"]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "snap.pickle")
            ct.dump_snapshot(path)
            import pickle
            snap = pickle.load(open(path, "rb"))
        assert snap["segments"] and len(snap["device_traces"]) > device
        return f"{len(snap['segments'])} segments in the snapshot"

    def tenant_pool_sleeps_and_wakes():
        # In a child interpreter: sleep and wake need expandable segments, which the config of
        # this process (CACHALOT_CONF as given) may not have.
        code = textwrap.dedent("""
            import torch, cachalot.torch as ct
            ct.enable(conf="expandable_segments:1")
            n = 1 << 24
            batch = ct.tenant("batch", sleepable=True)
            with batch:
                w = torch.arange(n, device="cuda", dtype=torch.float32)
            torch.cuda.synchronize()
            assert batch.memory_stats()["allocated_bytes.all.current"] >= 4 * n
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):  # its own graph pool; reads the tenant's tensor
                out = w * 2
            ptr = w.data_ptr()
            free_awake = torch.cuda.mem_get_info()[0]
            with ct.asleep(batch, "offload"):
                assert batch.is_asleep()
                assert batch.memory_stats()["reserved_bytes.all.current"] == 0
                gave = torch.cuda.mem_get_info()[0] - free_awake
                assert gave >= 4 * n, gave
            assert w.data_ptr() == ptr
            assert torch.equal(w, torch.arange(n, device="cuda", dtype=torch.float32))
            out.zero_()
            g.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, w * 2)
            print(f"gave back {gave >> 20} MiB asleep; contents and graph replay correct")
        """)
        env = dict(os.environ, CACHALOT_CONF="expandable_segments:1")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout.strip().splitlines()[-1]

    for name, fn in (("training step", training_step), ("inference loop", inference_loop),
                     ("out of memory raises and the process goes on", out_of_memory_then_go_on),
                     ("record_stream on a side stream defers reuse", record_stream_defers_reuse),
                     ("empty_cache returns memory (mem_get_info)", empty_cache_returns_memory),
                     ("memory fraction after first use is an error",
                      memory_fraction_after_first_use_is_loud),
                     ("graph capture through a private pool", graph_capture_through_a_private_pool),
                     ("memory_stats and dump_snapshot", stats_and_snapshot),
                     ("tenant pool sleeps and wakes (cachalot.torch.tenant)",
                      tenant_pool_sleeps_and_wakes)):
        check(name, fn)
    print(ct.memory_summary())
    return 1 if FAILED else 0


def cupy_part():
    try:
        import cupy
    except ImportError:
        print("skipped: cupy is not installed")
        return SKIP
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            raise RuntimeError("no device")
    except Exception as e:  # noqa: BLE001 -- CUDARuntimeError without a driver
        print(f"skipped: no CUDA device visible to cupy ({e})")
        return SKIP
    import cachalot
    import cachalot.cupy
    print(f"cupy {cupy.__version__}, library {cachalot.library_path()}")
    check("enable()", cachalot.cupy.enable)
    device = cupy.cuda.Device().id

    def arrays():
        a = cupy.random.rand(2048, 2048, dtype=cupy.float32)
        for _ in range(5):
            a = a @ a.T
            a /= cupy.linalg.norm(a)
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            b = cupy.arange(1 << 20, dtype=cupy.float64)
            total = float(b.sum())
        stream.synchronize()
        assert total == float((1 << 20) * ((1 << 20) - 1) // 2)
        s = cachalot.memory_stats(device)
        assert s["cachalot.num_streams"] >= 2, s  # the default and the non-blocking stream
        return f"{s['cachalot.num_allocs']} allocations on {s['cachalot.num_streams']} streams"

    def out_of_memory():
        free, total = cupy.cuda.runtime.memGetInfo()
        try:
            cupy.empty(total * 2, dtype=cupy.uint8)
        except cupy.cuda.memory.OutOfMemoryError as e:
            assert "cachalot" in str(e), str(e)
            x = cupy.ones(1 << 20)
            assert float(x.sum()) == float(1 << 20)
            return str(e)[:120]
        raise AssertionError("no out-of-memory error")

    check("arrays on the default and a non-blocking stream", arrays)
    check("out of memory raises OutOfMemoryError and CuPy goes on", out_of_memory)
    print(cachalot.memory_summary(device))
    return 1 if FAILED else 0


def main(argv):
    which = argv[1] if len(argv) > 1 else "all"
    if which == "torch":
        return torch_part()
    if which == "cupy":
        return cupy_part()
    if which != "all":
        print(__doc__)
        return 2
    codes = [subprocess.call([sys.executable, os.path.abspath(__file__), part])
             for part in ("torch", "cupy")]
    if any(c not in (0, SKIP) for c in codes):
        return 1
    return SKIP if all(c == SKIP for c in codes) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
