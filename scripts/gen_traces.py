#!/usr/bin/env python3
"""Generates cachalot's bundled allocation traces (bench/traces/*.csv) from model shapes.

Most traces are what a PyTorch-style framework would allocate and free, tensor by tensor, while
running a real model architecture: the shapes come from the architectures' definitions, the
order from how eager frameworks execute (forward keeps activations for backward, backward
frees them in reverse, optimizer state appears at the first step, torch.cat grows a KV cache).
The adversarial ones (cuDNN workspace spikes, a two-stream pipeline, pinned fragments, random
sizes, continuous batching) play patterns chosen to defeat fixed segments; bench/traces/README.md
describes each. The output is RMM's logging_resource_adaptor CSV, the format cachalot-replay
reads.
Deterministic: a fixed seed per trace. Python 3 standard library only.

usage: scripts/gen_traces.py [OUTPUT_DIR]   (default: bench/traces next to this script)
"""

import os
import random
import sys

HEADER = "Thread,Time,Action,Pointer,Size,Stream\n"
ALIGN = 512
FP16, FP32 = 2, 4


class Recorder:
    """Fake device: hands out addresses (reusing freed ones of the same size, as a caching
    allocator would) and logs every allocate and free with a thread, a time and a stream."""

    def __init__(self, seed, start_hour=9):
        self.rng = random.Random(seed)
        self.lines = []
        self.time_us = start_hour * 3600 * 10**6
        self.next_addr = 0x7F3A00000000
        self.free_by_size = {}
        self.live = {}
        self.thread = 140230412345600
        self.stream = 0

    def _tick(self):
        self.time_us += self.rng.randint(2, 40)
        t = self.time_us
        us, s = t % 10**6, t // 10**6
        return "%02d:%02d:%02d.%06d" % (s // 3600 % 24, s // 60 % 60, s % 60, us)

    def alloc(self, nbytes):
        nbytes = max(1, int(nbytes))
        rounded = (nbytes + ALIGN - 1) // ALIGN * ALIGN
        pool = self.free_by_size.get(rounded)
        if pool:
            addr = pool.pop()
        else:
            addr = self.next_addr
            self.next_addr += rounded
        self.live[addr] = (nbytes, rounded)
        self.lines.append("%d,%s,allocate,0x%x,%d,0x%x\n"
                          % (self.thread, self._tick(), addr, nbytes, self.stream))
        return addr

    def free(self, addr, stream=None):
        nbytes, rounded = self.live.pop(addr)
        stream = self.stream if stream is None else stream
        self.free_by_size.setdefault(rounded, []).append(addr)
        self.lines.append("%d,%s,free,0x%x,%d,0x%x\n"
                          % (self.thread, self._tick(), addr, nbytes, stream))

    def free_all(self, addrs):
        for a in addrs:
            self.free(a)

    def write(self, path):
        with open(path, "w") as f:
            f.write(HEADER)
            f.writelines(self.lines)
        return len(self.lines)


# --- Transformer inference ------------------------------------------------------------------

def llm_inference(rec):
    """GPT-style decoder (12 layers, d_model 1024, 16 heads, vocab 50257, fp16) served by two
    worker threads, each on its own CUDA stream. Requests of varying batch (1-16) and prompt
    length (16-1024) run a prefill, then greedy decoding with a HuggingFace-style KV cache that
    grows by torch.cat: every token allocates K and V one position longer and frees the old."""
    layers, d, heads, vocab = 12, 1024, 16, 50257
    dh = d // heads
    rec.thread, rec.stream = 140230412345600, 0  # weights load on the default stream
    weights = [rec.alloc(vocab * d * FP16), rec.alloc(2048 * d * FP16)]
    for _ in range(layers):
        for shape in ((d, 3 * d), (3 * d,), (d, d), (d,), (d,), (d,), (d,), (d,),
                      (d, 4 * d), (4 * d,), (4 * d, d), (d,)):
            n = 1
            for s in shape:
                n *= s
            weights.append(rec.alloc(n * FP16))
    workers = [(140230412345600, 0x5581A3C0F000), (140230395560192, 0x5581A3C11000)]
    copy_stream = 0x5581A3C13000
    active = []  # per worker: generator of steps
    requests = [(rec.rng.choice((1, 2, 4, 8, 16)), rec.rng.randint(16, 1024),
                 rec.rng.randint(6, 24)) for _ in range(8)]

    def request(worker, b, prompt, new_tokens):
        rec.thread, rec.stream = worker
        # Inputs land through a copy stream; the compute stream frees them.
        saved = rec.stream
        rec.stream = copy_stream
        ids, mask = rec.alloc(b * prompt * 8), rec.alloc(b * prompt * 8)
        rec.stream = saved
        kv = []
        s = prompt
        x = rec.alloc(b * s * d * FP16)
        for _ in range(layers):
            ln = rec.alloc(b * s * d * FP16)
            qkv = rec.alloc(b * s * 3 * d * FP16)
            k, v = rec.alloc(b * heads * s * dh * FP16), rec.alloc(b * heads * s * dh * FP16)
            kv.append([k, v])
            scores = rec.alloc(b * heads * s * s * FP16)
            probs = rec.alloc(b * heads * s * s * FP16)
            rec.free(scores)
            ctx = rec.alloc(b * s * d * FP16)
            rec.free_all((probs, qkv, ln))
            out = rec.alloc(b * s * d * FP16)
            rec.free(ctx)
            rec.free(x)
            ln2 = rec.alloc(b * s * d * FP16)
            up = rec.alloc(b * s * 4 * d * FP16)
            rec.free(ln2)
            down = rec.alloc(b * s * d * FP16)
            rec.free(up)
            x = rec.alloc(b * s * d * FP16)
            rec.free_all((down, out))
        logits = rec.alloc(b * s * vocab * FP16)
        rec.free(x)
        rec.free(ids, stream=rec.stream)
        rec.free(mask, stream=rec.stream)
        rec.free(logits)
        yield
        for _ in range(new_tokens):
            rec.thread, rec.stream = worker
            x = rec.alloc(b * d * FP16)
            for layer in range(layers):
                qkv = rec.alloc(b * 3 * d * FP16)
                k_old, v_old = kv[layer]
                # torch.cat([past, new], dim=-2): a new, slightly longer tensor each token.
                k = rec.alloc(b * heads * (s + 1) * dh * FP16)
                rec.free(k_old)
                v = rec.alloc(b * heads * (s + 1) * dh * FP16)
                rec.free(v_old)
                kv[layer] = [k, v]
                ctx = rec.alloc(b * d * FP16)
                rec.free(qkv)
                up = rec.alloc(b * 4 * d * FP16)
                rec.free(ctx)
                y = rec.alloc(b * d * FP16)
                rec.free_all((up, x))
                x = y
            logits = rec.alloc(b * vocab * FP16)
            tok = rec.alloc(b * 8)
            rec.free_all((logits, x, tok))
            s += 1
            yield
        rec.thread, rec.stream = worker
        for k, v in kv:
            rec.free_all((k, v))

    queue = list(requests)
    slots = [None, None]
    while queue or any(slots):
        for w in range(2):
            if slots[w] is None and queue:
                slots[w] = request(workers[w], *queue.pop(0))
            if slots[w] is not None:
                try:
                    next(slots[w])
                except StopIteration:
                    slots[w] = None
    rec.thread, rec.stream = workers[0][0], 0
    rec.free_all(weights)


# --- Transformer training -------------------------------------------------------------------

def llm_training(rec):
    """GPT-2 medium-like training step (12 layers, d_model 1024, 16 heads, vocab 50257) with
    mixed precision: fp32 master weights, fp16 activations, AdamW. Each step takes a batch of
    about 16k tokens at a sequence length drawn from 128-2048 (so the batch size varies).
    Forward keeps every activation needed by backward; backward, run by the autograd thread
    as in PyTorch, frees them in reverse, allocating gradients (set to None after each step);
    AdamW's two fp32 state tensors per parameter appear at the first optimizer step."""
    layers, d, heads, vocab = 12, 1024, 16, 50257
    fwd_thread, bwd_thread = 140551204308800, 140549012522560
    rec.thread = fwd_thread
    param_shapes = [vocab * d, 1024 * d]
    for _ in range(layers):
        param_shapes += [d, d, 3 * d * d, 3 * d, d * d, d, d, d, 4 * d * d, 4 * d, 4 * d * d, d]
    params = [rec.alloc(n * FP32) for n in param_shapes]
    adam = []
    for step in range(14):
        seq = rec.rng.choice((128, 256, 512, 1024, 2048))
        b = max(1, 16384 // seq)
        rec.thread = fwd_thread
        half = [rec.alloc(n * FP16) for n in param_shapes]  # autocast weight copies
        x = rec.alloc(b * seq * d * FP16)
        saved = []
        for _ in range(layers):
            ln1 = rec.alloc(b * seq * d * FP16)
            qkv = rec.alloc(b * seq * 3 * d * FP16)
            scores = rec.alloc(b * heads * seq * seq * FP16)
            probs = rec.alloc(b * heads * seq * seq * FP16)
            rec.free(scores)
            mask = rec.alloc(b * heads * seq * seq)
            ctx = rec.alloc(b * seq * d * FP16)
            attn = rec.alloc(b * seq * d * FP16)
            h = rec.alloc(b * seq * d * FP16)
            ln2 = rec.alloc(b * seq * d * FP16)
            fc1 = rec.alloc(b * seq * 4 * d * FP16)
            gelu = rec.alloc(b * seq * 4 * d * FP16)
            fc2 = rec.alloc(b * seq * d * FP16)
            y = rec.alloc(b * seq * d * FP16)
            rec.free_all((attn, fc2))
            saved.append([x, ln1, qkv, probs, mask, ctx, h, ln2, fc1, gelu])
            x = y
        logits = rec.alloc(b * seq * vocab * FP16)
        logits32 = rec.alloc(b * seq * vocab * FP32)
        loss = rec.alloc(4)
        rec.free(logits)
        rec.thread = bwd_thread
        grads = [None] * len(params)
        g_logits = rec.alloc(b * seq * vocab * FP16)
        rec.free(logits32)
        g = rec.alloc(b * seq * d * FP16)
        rec.free(g_logits)
        grads[0] = rec.alloc(param_shapes[0] * FP32)
        for layer in reversed(range(layers)):
            acts = saved.pop()
            base = 2 + 12 * layer
            for j in (11, 10, 9, 8):  # fc2, fc1 weights and biases
                grads[base + j] = rec.alloc(param_shapes[base + j] * FP32)
            g_fc = rec.alloc(b * seq * 4 * d * FP16)
            rec.free_all(acts[9:7:-1])  # gelu, fc1
            g_ln2 = rec.alloc(b * seq * d * FP16)
            rec.free(g_fc)
            rec.free(acts[7])
            for j in (7, 6, 5, 4, 3, 2, 1, 0):
                grads[base + j] = rec.alloc(param_shapes[base + j] * FP32)
            g_ctx = rec.alloc(b * seq * d * FP16)
            g_probs = rec.alloc(b * heads * seq * seq * FP16)
            rec.free_all(acts[5:2:-1])  # ctx, mask, probs
            g_qkv = rec.alloc(b * seq * 3 * d * FP16)
            rec.free_all((g_probs, g_ctx, acts[2], acts[6], acts[1]))
            g_in = rec.alloc(b * seq * d * FP16)
            rec.free_all((g_qkv, g_ln2, g))
            rec.free(acts[0])
            g = g_in
        grads[1] = rec.alloc(param_shapes[1] * FP32)
        rec.free_all((g, x, loss))
        rec.thread = fwd_thread
        rec.free_all(half)
        if not adam:
            adam = [rec.alloc(n * FP32) for n in param_shapes for _ in (0, 1)]
        for i, n in enumerate(param_shapes):  # multi-tensor apply temporaries, chunked
            if i % 24 == 0:
                tmp = rec.alloc(min(n, 1 << 22) * FP32)
                rec.free(tmp)
        rec.free_all(grads)  # zero_grad(set_to_none=True)
    rec.free_all(adam)
    rec.free_all(params)


# --- CNN training ---------------------------------------------------------------------------

def resnet50_convs(size):
    """(in_ch, out_ch, kernel, stride, out_hw) of each ResNet-50 conv for a size x size input."""
    convs = [(3, 64, 7, 2, size // 2)]
    hw = size // 4
    in_ch = 64
    for blocks, mid, stride in ((3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)):
        for i in range(blocks):
            s = stride if i == 0 else 1
            out_hw = hw // s
            convs.append((in_ch, mid, 1, 1, hw))
            convs.append((mid, mid, 3, s, out_hw))
            convs.append((mid, mid * 4, 1, 1, out_hw))
            if i == 0:
                convs.append((in_ch, mid * 4, 1, s, out_hw))
            in_ch, hw = mid * 4, out_hw
    return convs


def cnn_training(rec):
    """ResNet-50 training with SGD and momentum, fp32, with progressive resizing: epochs at
    128, 160, 192 and 224 pixels and batch sizes 96 to 48, plus a short last batch. Per conv:
    output and batch-norm output saved for backward, batch-norm statistics, a cuDNN workspace
    for the chosen algorithm; backward frees activations in reverse, allocates gradients and
    bigger cuDNN workspaces; momentum buffers appear at the first step."""
    rec.thread = 139872410597184
    convs224 = resnet50_convs(224)
    param_sizes = []
    for cin, cout, k, _, _ in convs224:
        param_sizes += [cin * cout * k * k, cout, cout]  # conv weight, bn weight and bias
    param_sizes += [2048 * 1000, 1000]
    params = [rec.alloc(n * FP32) for n in param_sizes]
    momentum = []
    schedule = [(128, 96), (128, 96), (160, 80), (160, 80), (160, 23), (192, 64), (192, 64),
                (224, 48), (224, 48), (224, 48), (224, 17)]
    for size, batch in schedule:
        convs = resnet50_convs(size)
        x = rec.alloc(batch * 3 * size * size * FP32)
        saved = []
        inp = x
        for cin, cout, k, stride, hw in convs:
            out = rec.alloc(batch * cout * hw * hw * FP32)
            ws = rec.alloc(rec.rng.choice((0, 1, 4, 16, 64)) * 2**20 + 4096)
            rec.free(ws)
            bn = rec.alloc(batch * cout * hw * hw * FP32)
            mean, invstd = rec.alloc(cout * FP32), rec.alloc(cout * FP32)
            saved.append((out, bn, mean, invstd, batch * cin * (hw * stride) ** 2 * FP32))
        pooled = rec.alloc(batch * 2048 * FP32)
        logits = rec.alloc(batch * 1000 * FP32)
        loss = rec.alloc(4)
        grads = [rec.alloc(2048 * 1000 * FP32), rec.alloc(1000 * FP32)]
        g = rec.alloc(batch * 2048 * FP32)
        rec.free_all((logits, pooled))
        for i in reversed(range(len(convs))):
            out, bn, mean, invstd, in_bytes = saved.pop()
            g_bn = rec.alloc(batch * convs[i][1] * convs[i][4] ** 2 * FP32)
            rec.free_all((bn, mean, invstd))
            ws = rec.alloc(rec.rng.choice((1, 8, 32, 128)) * 2**20)
            g_w = rec.alloc(param_sizes[3 * i] * FP32)
            g_in = rec.alloc(in_bytes)
            rec.free(ws)
            grads += [g_w, rec.alloc(convs[i][1] * FP32), rec.alloc(convs[i][1] * FP32)]
            rec.free_all((g_bn, out, g))
            g = g_in
        rec.free_all((g, x, loss))
        if not momentum:
            momentum = [rec.alloc(n * FP32) for n in param_sizes]
        rec.free_all(grads)
    rec.free_all(momentum)
    rec.free_all(params)


# --- CNN training with cuDNN workspace spikes ------------------------------------------------

def cnn_workspace_spike(rec):
    """ResNet-50 training (fp32, SGD with momentum) with multi-scale inputs and
    torch.backends.cudnn.benchmark=True. The input size changes every step (160-288 pixels,
    with a batch of about as many pixels), so activations of many shapes come and go and
    fragment the cache; the first time a size is seen, cuDNN's autotuner tries three
    algorithms per convolution, each with its own workspace, and in backward the winners of
    half the late-stage convolutions keep workspaces of 300-700 MiB: spikes early in backward,
    while most activations of the step are still live."""
    rec.thread = 139872410597185
    convs224 = resnet50_convs(224)
    param_sizes = []
    for cin, cout, k, _, _ in convs224:
        param_sizes += [cin * cout * k * k, cout, cout]
    param_sizes += [2048 * 1000, 1000]
    params = [rec.alloc(n * FP32) for n in param_sizes]
    momentum = []
    seen = {}  # input size -> (forward workspaces, backward workspaces) chosen per conv
    sizes = [224, 224, 160, 256, 192, 288, 224, 160, 256, 288, 192, 224, 256, 160, 288]

    def tune(batch, hw, cout, backward):
        """Autotuning of one convolution: try three algorithms, keep one workspace size."""
        act = batch * cout * hw * hw * FP32
        trials = [rec.rng.choice((0.25, 0.5, 1.0, 2.0)) * act for _ in range(3)]
        trials = [min(max(t, 1 << 20), 1200 << 20) for t in trials]
        for t in trials:
            ws = rec.alloc(t + rec.rng.randint(0, 4095))
            rec.free(ws)
        if backward and hw <= 14 and rec.rng.random() < 0.5:
            return int(rec.rng.uniform(300, 700) * 2**20)  # FFT / Winograd-style winners
        return int(rec.rng.choice((0, 1, 8, 32, 96)) * 2**20) + 4096

    for size in sizes:
        batch = 64 * 224 * 224 // (size * size)  # about as many pixels per batch
        convs = resnet50_convs(size)
        first = size not in seen
        if first:
            seen[size] = ([], [])
        fwd_ws, bwd_ws = seen[size]
        x = rec.alloc(batch * 3 * size * size * FP32)
        saved = []
        for i, (cin, cout, k, stride, hw) in enumerate(convs):
            out = rec.alloc(batch * cout * hw * hw * FP32)
            if first:
                fwd_ws.append(tune(batch, hw, cout, False))
            ws = rec.alloc(fwd_ws[i])  # never 0: at least 4 KiB
            rec.free(ws)
            bn = rec.alloc(batch * cout * hw * hw * FP32)
            stats = rec.alloc(2 * cout * FP32)
            saved.append((out, bn, stats, batch * cin * (hw * stride) ** 2 * FP32))
        logits = rec.alloc(batch * 1000 * FP32)
        loss = rec.alloc(4)
        g = rec.alloc(batch * 2048 * FP32)
        rec.free(logits)
        grads = [rec.alloc(2048 * 1000 * FP32), rec.alloc(1000 * FP32)]
        for i in reversed(range(len(convs))):
            out, bn, stats, in_bytes = saved.pop()
            cout, hw = convs[i][1], convs[i][4]
            g_bn = rec.alloc(batch * cout * hw * hw * FP32)
            rec.free_all((bn, stats))
            if first:
                bwd_ws.append(tune(batch, hw, cout, True))
            ws = rec.alloc(bwd_ws[len(convs) - 1 - i])
            g_in = rec.alloc(in_bytes)
            rec.free(ws)
            grads += [rec.alloc(param_sizes[3 * i] * FP32), rec.alloc(2 * cout * FP32)]
            rec.free_all((g_bn, out, g))
            g = g_in
        rec.free_all((g, x, loss))
        if not momentum:
            momentum = [rec.alloc(n * FP32) for n in param_sizes]
        rec.free_all(grads)
    rec.free_all(momentum)
    rec.free_all(params)


# --- Two-stream producer / consumer ---------------------------------------------------------

def two_stream_pipeline(rec):
    """A GPU input pipeline feeding a detector near the memory limit, two threads each on its
    own stream. The producer (stream P) decodes variable-size video frames in chunks of 8,
    converts and resizes them through temporary buffers, and prefetches batches (16-48 frames
    at 512-896 pixels) until its queue holds about 1.2 GiB; the consumer (stream C) holds the
    model's weights, runs a 16-stage backbone keeping four feature maps for the pyramid, frees
    each batch on its own stream (a cross-stream free: the block belongs to P's pool) and
    leaves its detections to the producer, which copies them out and frees them on P (a
    cross-stream free the other way). Live memory stays above half its peak nearly always."""
    producer, consumer = (140112233445566, 0x55D0C0A01000), (140112216660224, 0x55D0C0A03000)
    queue, results = [], []
    steps, budget = 200, 1.2 * 2**30

    def produce():
        rec.thread, rec.stream = producer
        frames = rec.rng.choice((16, 24, 32, 40, 48))
        h = rec.rng.choice((480, 720, 1080))
        w = h * 16 // 9
        side = rec.rng.choice((512, 640, 768, 896))
        batch = rec.alloc(frames * 3 * side * side * FP16)
        for _ in range(frames // 8):
            raw = rec.alloc(8 * h * w * 3)  # decoded uint8 frames
            tmp = rec.alloc(8 * 3 * h * w * FP16)  # colour conversion, then resize into batch
            rec.free_all((raw, tmp))
        meta = rec.alloc(frames * 64)
        queue.append((batch, meta, frames, side))

    def queued():
        return sum(rec.live[b][0] for b, _, _, _ in queue)

    def collect():
        rec.thread, rec.stream = producer
        while results:
            det, scores = results.pop(0)
            host = rec.alloc(8192)  # staging of the copy to the host
            rec.free(host)
            rec.free(det)  # allocated on C, freed on P
            rec.free(scores)

    def consume():
        batch, meta, frames, side = queue.pop(0)
        rec.thread, rec.stream = consumer
        x, pyramid = None, []
        hw, ch = side // 2, 32
        for stage in range(16):
            if stage in (4, 8, 12):
                hw, ch = hw // 2, ch * 2
            y = rec.alloc(frames * ch * hw * hw * FP16)
            if stage % 4 == 1:
                ws = rec.alloc(rec.rng.choice((8, 32, 64)) * 2**20)
                rec.free(ws)
            if x is not None and stage % 4 == 0:
                pyramid.append(x)  # kept for the feature pyramid
            elif x is not None:
                rec.free(x)
            x = y
        pyramid.append(x)
        heads = [rec.alloc(rec.live[p][0] // 4) for p in pyramid]
        rec.free_all(pyramid)
        det = rec.alloc(frames * 300 * 6 * FP32)
        scores = rec.alloc(frames * 300 * FP32)
        rec.free_all(heads)
        rec.free(batch, stream=consumer[1])  # allocated on P, freed on C
        rec.free(meta, stream=consumer[1])
        results.append((det, scores))

    rec.thread, rec.stream = consumer
    weights = [rec.alloc(rec.rng.choice((1, 2, 4, 9)) * 2**20 + rec.rng.randint(0, 2**20))
               for _ in range(240)]
    for step in range(steps):
        while (not queue or queued() < budget) and step < steps - 4:
            produce()
        consume()
        if rec.rng.random() < 0.6:
            collect()
    while queue:
        consume()
    collect()
    rec.thread, rec.stream = consumer
    rec.free_all(weights)


# --- Medium blocks pinned by small long-lived ones ------------------------------------------

def pinned_fragments(rec):
    """The adversarial pattern of issue 10, in cycles. Fill: medium blocks (64 KiB-1 MiB and
    1-9 MiB, the sizes that share segments in a caching allocator) allocated back to back,
    many followed by a small long-lived block (256 B-16 KiB after 80 % of the first kind,
    1-2 MiB after 30 % of the second: per-request metadata, a logits row). Then every medium block is freed,
    leaving the long-lived ones spread over the memory, and larger requests (16-160 MiB) come
    until the same bytes (5 GiB) are live again; they are freed in turn and the next cycle
    starts, while the oldest third of the long-lived blocks is released and new ones pinned
    elsewhere."""
    rec.thread = 140551204308801
    pins = []
    target = 5 * 2**30
    for _ in range(4):
        live = sum(rec.live[p][0] for p in pins)
        mediums = []
        while live < target:
            if rec.rng.random() < 0.4:
                m = rec.alloc(rec.rng.randint(64 * 1024, 1 << 20))
                pin = rec.rng.randint(256, 16 * 1024) if rec.rng.random() < 0.8 else 0
            else:
                m = rec.alloc(rec.rng.randint(1 << 20, 9 << 20))
                pin = rec.rng.randint(1 << 20, 2 << 20) if rec.rng.random() < 0.3 else 0
            mediums.append(m)
            live += rec.live[m][0]
            if pin:
                pins.append(rec.alloc(pin))
                live += pin
        rec.rng.shuffle(mediums)
        rec.free_all(mediums)
        live = sum(rec.live[p][0] for p in pins)
        large = []
        while live < target:
            n = rec.rng.randint(16, 160) * 2**20 + rec.rng.randint(0, 2**20)
            large.append(rec.alloc(n))
            live += n
        rec.free_all(large)
        old = pins[: len(pins) // 3]  # the oldest third of the long-lived blocks ends
        del pins[: len(pins) // 3]
        rec.free_all(old)
    rec.free_all(pins)


# --- Mixed random sizes ---------------------------------------------------------------------

def random_mixed(rec):
    """RMM's random-allocations benchmark shape: 10,000 allocations with sizes uniform in
    [1 B, 64 MiB]; each step allocates with probability 73 % (while under 16,000 MiB live and
    fewer than 10,000 were made), else frees a live allocation chosen at random."""
    rec.thread = 139990011223344
    max_size, max_usage, count = 64 * 2**20, 16000 * 2**20, 10000
    live, used, made = [], 0, 0
    while made < count or live:
        size = rec.rng.randint(1, max_size)
        alloc = not live or (rec.rng.randrange(100) < 73 and made < count
                             and used + size < max_usage)
        if alloc:
            live.append((rec.alloc(size), size))
            used += size
            made += 1
        else:
            i = rec.rng.randrange(len(live))
            live[i], live[-1] = live[-1], live[i]
            addr, n = live.pop()
            rec.free(addr)
            used -= n


# --- LLM serving with continuous batching ---------------------------------------------------

def llm_serving(rec):
    """A text-generation server with continuous batching over padded KV caches, as servers did
    before paged attention (a 16-layer decoder, d_model 2048, 16 heads, vocab 32,000, fp16).
    40 requests with prompts of 32-1,536 tokens stop after 8-64 new tokens. A new
    request is prefilled alone (attention scores s x s per head), then its KV cache is
    concatenated with the running batch's: per layer a new [batch, heads, longest, 128] K and
    V, the old ones freed. Every decoding step grows each layer's K and V by one position
    (torch.cat: allocate the longer one, free the old); when requests finish, the batch is
    filtered and the caches re-made without them. Batch (1-12) and length change every step."""
    layers, d, heads, vocab = 16, 2048, 16, 32000
    rec.thread, rec.stream = 140320011112222, 0
    weights = [rec.alloc(vocab * d * FP16)]
    for _ in range(layers):
        for n in (3 * d * d, d * d, 4 * d * d, 4 * d * d, d, d):
            weights.append(rec.alloc(n * FP16))
    weights.append(rec.alloc(vocab * d * FP16))

    def kv_bytes(b, s):
        return b * s * d * FP16  # heads x head_dim = d

    batch = []  # [prompt+generated length, tokens left]
    kv = None  # per layer [k, v]
    waiting = [(rec.rng.randint(32, 1536), rec.rng.randint(8, 64)) for _ in range(40)]
    max_batch = 12

    def prefill(prompt):
        x = rec.alloc(prompt * d * FP16)
        new_kv = []
        for _ in range(layers):
            k, v = rec.alloc(kv_bytes(1, prompt)), rec.alloc(kv_bytes(1, prompt))
            scores = rec.alloc(heads * prompt * prompt * FP16)
            rec.free(scores)
            up = rec.alloc(prompt * 4 * d * FP16)
            y = rec.alloc(prompt * d * FP16)
            rec.free_all((up, x))
            x = y
            new_kv.append([k, v])
        logits = rec.alloc(vocab * FP32)
        rec.free_all((logits, x))
        return new_kv

    def remake(old, extra, b, s):
        """Concatenate or filter: a new [b, s] cache per layer, the old ones freed."""
        out = []
        for layer in range(layers):
            k, v = rec.alloc(kv_bytes(b, s)), rec.alloc(kv_bytes(b, s))
            for part in (old, extra):
                if part is not None:
                    rec.free_all(part[layer])
            out.append([k, v])
        return out

    while waiting or batch:
        if waiting and len(batch) < max_batch and (rec.rng.random() < 0.3 or not batch):
            prompt, new = waiting.pop(0)
            new_kv = prefill(prompt)
            batch.append([prompt, new])
            kv = remake(kv, new_kv, len(batch), max(r[0] for r in batch))
        b, s = len(batch), max(r[0] for r in batch)
        x = rec.alloc(b * d * FP16)
        for layer in range(layers):
            k, v = kv[layer]
            nk = rec.alloc(kv_bytes(b, s + 1))
            rec.free(k)
            nv = rec.alloc(kv_bytes(b, s + 1))
            rec.free(v)
            kv[layer] = [nk, nv]
        logits = rec.alloc(b * vocab * FP32)
        rec.free_all((logits, x))
        for r in batch:
            r[0] += 1
            r[1] -= 1
        done = [r for r in batch if r[1] == 0]
        if done:
            batch = [r for r in batch if r[1] > 0]
            if batch:
                kv = remake(kv, None, len(batch), max(r[0] for r in batch))
            else:
                for pair in kv:
                    rec.free_all(pair)
                kv = None
    rec.free_all(weights)


TRACES = [
    ("llm_inference.csv", llm_inference, 11),
    ("llm_training.csv", llm_training, 22),
    ("cnn_training.csv", cnn_training, 33),
    ("cnn_workspace_spike.csv", cnn_workspace_spike, 44),
    ("two_stream_pipeline.csv", two_stream_pipeline, 55),
    ("pinned_fragments.csv", pinned_fragments, 66),
    ("random_mixed.csv", random_mixed, 77),
    ("llm_serving.csv", llm_serving, 88),
]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "bench", "traces")
    os.makedirs(out_dir, exist_ok=True)
    for name, model, seed in TRACES:
        rec = Recorder(seed)
        model(rec)
        assert not rec.live, "%s leaks %d allocations" % (name, len(rec.live))
        n = rec.write(os.path.join(out_dir, name))
        print("%-20s %6d ops" % (name, n))


if __name__ == "__main__":
    main()
