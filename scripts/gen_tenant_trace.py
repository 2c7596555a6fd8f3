#!/usr/bin/env python3
"""Generates bench/traces/tenants/two_tenant_serving.csv: two tenants sharing one GPU.

- "critical" (thread 1, stream 0xa0): latency-critical LLM serving. fp16 weights of a 16-layer,
  d_model 2048 decoder are loaded once; requests then arrive continuously (up to 8 at once),
  each with a prefill (activations proportional to its prompt) and decoding steps whose KV
  cache grows a block of 32 tokens at a time, torch.cat style (the longer K and V are allocated
  before the old ones are freed).
- "batch" (thread 2, stream 0xb0): an offline job training a 24-layer model with a sequence
  length that changes every step: forward keeps each layer's activations, backward frees them
  in reverse while gradients come and go, AdamW state appears at the first step.

The tenants' operations interleave in time, one decoding step of the critical tenant per
forward or backward slice of the batch job, so the batch job's activation peaks meet the
critical tenant's KV-cache growth. Replayed on a device of 1.1x the combined peak
(cachalot-replay --capacity-factor 1.1), memory is short at those moments: which tenant fails
is decided by the allocator. The output is RMM's logging_resource_adaptor CSV, the format
cachalot-replay reads. Deterministic (fixed seed); Python 3 standard library only.

usage: scripts/gen_tenant_trace.py [OUTPUT.csv]
       (default: bench/traces/tenants/two_tenant_serving.csv next to this script)
"""

import os
import random
import sys

HEADER = "Thread,Time,Action,Pointer,Size,Stream\n"
FP16, FP32 = 2, 4
CRITICAL = (1001, 0xA0)
BATCH = (1002, 0xB0)
PEAK = {"batch": False}  # the batch job holds its activations: traffic bursts come then


class Log:
    """Hands out addresses (unique among live allocations) and writes trace lines."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.lines = []
        self.time_us = 10 * 3600 * 10**6
        self.next_addr = 0x7F0000000000
        self.live = {}

    def _time(self):
        self.time_us += self.rng.randint(3, 30)
        s, us = divmod(self.time_us, 10**6)
        return "%02d:%02d:%02d.%06d" % (s // 3600 % 24, s // 60 % 60, s % 60, us)

    def alloc(self, who, nbytes):
        nbytes = max(512, int(nbytes))
        addr = self.next_addr
        self.next_addr += (nbytes + 4095) // 4096 * 4096
        self.live[addr] = nbytes
        self.lines.append("%d,%s,allocate,0x%x,%d,0x%x\n" % (who[0], self._time(), addr, nbytes,
                                                              who[1]))
        return addr

    def free(self, who, addr):
        nbytes = self.live.pop(addr)
        self.lines.append("%d,%s,free,0x%x,%d,0x%x\n" % (who[0], self._time(), addr, nbytes,
                                                          who[1]))


def critical_tenant(log):
    """Yields after each step; the KV cache of every request grows in blocks of 32 tokens."""
    layers, d, vocab = 16, 2048, 32000
    weights = [log.alloc(CRITICAL, vocab * d * FP16)]
    for _ in range(layers):
        for n in (3 * d * d, d * d, 4 * d * d, 4 * d * d, d, d):
            weights.append(log.alloc(CRITICAL, n * FP16))
    yield
    active = []  # [batch, tokens, kv (per layer [k, v]), tokens left]
    for step in range(500):
        burst = 0.9 if PEAK["batch"] else 0.15
        if len(active) < 8 and log.rng.random() < burst:  # a request arrives: prefill
            b, prompt = log.rng.choice((1, 2, 4, 8)), log.rng.randint(64, 2048)
            x = log.alloc(CRITICAL, b * prompt * d * FP16)
            kv = []
            tokens = (prompt + 31) // 32 * 32
            for _ in range(layers):
                qkv = log.alloc(CRITICAL, b * prompt * 3 * d * FP16)
                kv.append([log.alloc(CRITICAL, b * tokens * d * FP16),
                           log.alloc(CRITICAL, b * tokens * d * FP16)])
                up = log.alloc(CRITICAL, b * prompt * 4 * d * FP16)
                log.free(CRITICAL, qkv)
                log.free(CRITICAL, up)
            logits = log.alloc(CRITICAL, b * vocab * FP32)
            log.free(CRITICAL, x)
            log.free(CRITICAL, logits)
            active.append([b, prompt, kv, log.rng.randint(32, 320), tokens])
            yield
        for req in active:  # one decoding step of every active request
            b, _, kv, _, cap = req
            req[1] += 1
            req[3] -= 1
            grow = req[1] > cap
            if grow:
                req[4] = cap = cap + 32
            h = log.alloc(CRITICAL, b * 4 * d * FP16)
            for layer in range(layers):
                if grow:  # torch.cat: the longer copy exists before the old one goes
                    k, v = kv[layer]
                    kv[layer] = [log.alloc(CRITICAL, b * cap * d * FP16),
                                 log.alloc(CRITICAL, b * cap * d * FP16)]
                    log.free(CRITICAL, k)
                    log.free(CRITICAL, v)
            log.free(CRITICAL, h)
        for req in [r for r in active if r[3] <= 0]:  # finished: its KV cache goes
            for k, v in req[2]:
                log.free(CRITICAL, k)
                log.free(CRITICAL, v)
            active.remove(req)
        yield
    for req in active:
        for k, v in req[2]:
            log.free(CRITICAL, k)
            log.free(CRITICAL, v)
    for w in weights:
        log.free(CRITICAL, w)


def batch_tenant(log):
    """Training steps; yields every few layers of forward or backward."""
    layers, d = 24, 1536
    params = [log.alloc(BATCH, n * FP32) for _ in range(layers)
              for n in (4 * d * d, 8 * d * d)]
    state = []
    yield
    for step in range(40):
        tokens = log.rng.randrange(1024, 12289, 256)
        acts = []
        for layer in range(layers):  # forward: every layer's activations are kept
            acts.append([log.alloc(BATCH, tokens * n * FP16) for n in (d, 4 * d, d)])
            if layer % 3 == 2:
                yield
        loss = log.alloc(BATCH, tokens * 32000 * FP16)
        log.free(BATCH, loss)
        PEAK["batch"] = True
        yield
        yield
        PEAK["batch"] = False
        for layer in reversed(range(layers)):  # backward: frees in reverse, grads come and go
            g = log.alloc(BATCH, tokens * 4 * d * FP16)
            for a in acts[layer]:
                log.free(BATCH, a)
            log.free(BATCH, g)
            if layer % 3 == 0:
                yield
        if not state:  # AdamW moments, from the first step on
            state = [log.alloc(BATCH, p_size) for p_size in
                     [log.live[p] for p in params] * 2]
        yield
    for a in state + params:
        log.free(BATCH, a)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        here, "..", "bench", "traces", "tenants", "two_tenant_serving.csv")
    log = Log(seed=2024)
    tenants = [critical_tenant(log), batch_tenant(log)]
    while tenants:
        for t in list(tenants):
            try:
                next(t)
            except StopIteration:
                tenants.remove(t)
    with open(out, "w") as f:
        f.write(HEADER)
        f.writelines(log.lines)
    print("%s: %d lines" % (out, len(log.lines)))


if __name__ == "__main__":
    main()
