#!/usr/bin/env python3
"""Aggregate decode throughput of `kestrel serve` with 1, 2, 4 and 8
concurrent streams.

Starts the server (8 slots), then for each concurrency level sends that many
streaming completions at once (short distinct prompts, EOS ignored, a fixed
number of tokens each) and reports the aggregate decode rate while all the
streams decode: from the moment the last stream got its first token (every
prompt is in) to the moment the first stream got its last, each stream's
decode steps in that window over its length. Prompt processing is left out,
as llama-bench's tg leaves it out. A second figure, "first to last token",
divides all tokens after each stream's first by the time from the first
token of any stream to the last of any: it also counts the step that
prefilled the later streams' prompts and the tail where fewer streams run.
With one stream the two are the same. Each level runs --reps times, the
levels taking turns within each repetition; the tables show the mean and
the sample standard deviation, and the speed-up over one stream (of the
means, and the median of each repetition's own ratio). With
--peer LLAMA_SERVER the same measurement runs against llama.cpp's
llama-server (same model, slots, context and threads) and a last table
compares the two. Python standard library only.

usage: scripts/bench-serve.py [-m MODEL] [--bin KESTREL] [--peer LLAMA_SERVER]
                              [-n TOKENS] [--reps R] [-t THREADS] [--levels 1,2,4,8]
                              [--device cpu|gpu]

--device gpu runs kestrel's batch on the GPU (the peer then gets -ngl 99).
"""

import argparse
import http.client
import json
import os
import selectors
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, proc, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            sys.exit(f"kestrel serve exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit("server not ready")


class Stream:
    """One streaming completion's socket and parser: `feed` takes what a
    read returned and records one arrival time per token.

    The client shares the machine with the server, so it reads raw sockets
    and counts events by their bytes instead of parsing HTTP chunks and
    JSON in Python per token (that loop cost about 4% of a two-core machine
    at four streams, the server's workers losing more than that: each
    preemption stalls a pass that both workers share).
    """

    # A choice still generating: its JSON has this, unspaced (both servers
    # write compact JSON), and generated text cannot hold it (its quotes are
    # escaped). One per token, as the chunks carrying text.
    MARKER = b'"finish_reason":null'
    DONE = b"data: [DONE]"
    KEEP = max(len(MARKER), len(DONE)) - 1

    def __init__(self, port, prompt, n_tokens, seed):
        body = json.dumps({
            "prompt": prompt, "max_tokens": n_tokens, "stream": True,
            "ignore_eos": True, "temperature": 0.8, "seed": seed,
            "cache_prompt": False,
        }).encode()
        request = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                   f"Connection: close\r\n\r\n").encode() + body
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=300)
        self.sock.sendall(request)
        self.sock.setblocking(False)
        self.buf = b""
        self.head = None
        self.times = []
        self.finished = False

    def feed(self, data, now):
        """Takes one read's bytes (empty at the end of the stream)."""
        if not data:
            if self.head is not None and self.head.split()[1] != b"200":
                raise RuntimeError(f"HTTP {self.head.split()[1].decode()}: {self.buf!r}")
            self.finished = True
            return
        self.buf += data
        if self.head is None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            self.head, self.buf = self.buf[:end], self.buf[end + 4:]
        if self.head.split()[1] != b"200":
            return  # the error body, read to its end
        self.times.extend([now] * self.buf.count(self.MARKER))
        if self.DONE in self.buf:
            self.finished = True
            return
        # A marker split across reads is counted when its end arrives.
        self.buf = self.buf[-self.KEEP:]


def run_level(port, n, n_tokens, rep):
    """n concurrent streams, read by one thread: a step's chunks for all
    streams arrive together and are taken in one wake-up (a thread per
    stream woke, and took a core from the server, once per stream per
    step)."""
    topics = ["the sea", "a mountain", "bread", "a robot", "the moon",
              "winter", "a river", "music"]
    streams = [Stream(port, f"Write a long story about {topics[i % 8]}.", n_tokens,
                      1000 * rep + i) for i in range(n)]
    sel = selectors.DefaultSelector()
    for st in streams:
        sel.register(st.sock, selectors.EVENT_READ, st)
    try:
        while sel.get_map():
            ready = sel.select(timeout=300)
            if not ready:
                sys.exit(f"{n} streams: no data for 300 s")
            for key, _ in ready:
                st = key.data
                try:
                    data = st.sock.recv(1 << 16)
                except BlockingIOError:
                    continue
                st.feed(data, time.perf_counter())
                if st.finished:
                    sel.unregister(st.sock)
                    st.sock.close()
    finally:
        sel.close()
        for st in streams:
            st.sock.close()
    results = [st.times for st in streams]
    if any(len(t) < 2 for t in results):
        sys.exit(f"a stream of {n} ended with fewer than two tokens")
    # Chunks carrying text: one per token, except text held back (a partial
    # UTF-8 character or stop-string prefix) which arrives with a later one.
    tokens = sum(len(t) for t in results)
    first = min(t[0] for t in results)
    last = max(t[-1] for t in results)
    # The first token of each stream is not a decode step's output.
    overall = (tokens - n) / (last - first)
    # While all n streams decode: from the last stream's first token (the
    # others' prompts are in by then) to the first stream's last. Each
    # stream emits one token per step there; a stream's tokens of the
    # window's first and last steps arrive within a millisecond of its
    # ends (steps are milliseconds apart), and are the fence posts.
    start = max(t[0] for t in results)
    end = min(t[-1] for t in results)
    if end - start < 0.05:
        return overall, overall
    tol = 0.001
    steps = sum(sum(1 for x in t if start - tol <= x <= end + tol) - 1 for t in results)
    return steps / (end - start), overall


def measure(cmd, levels, n_tokens, reps):
    """Starts a server with `cmd` (a list with {port} in it), measures every
    level, stops it; returns [(streams, mean t/s, stddev)]."""
    port = free_port()
    proc = subprocess.Popen([c.replace("{port}", str(port)) for c in cmd],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port, proc)
        run_level(port, 1, 16, 99)  # warm-up
        # Levels alternate within each repetition, so that a shared
        # machine's drift over the run weighs on every level alike (all
        # repetitions of one level, then the next, let a slow minute land on
        # one level and move the ratios).
        rates = {n: [] for n in levels}
        for rep in range(reps):
            for n in levels:
                rates[n].append(run_level(port, n, n_tokens, rep))

        def stats(xs):
            return statistics.mean(xs), statistics.stdev(xs) if reps > 1 else 0.0
        return [(n, *stats([r[0] for r in rates[n]]), *stats([r[1] for r in rates[n]]),
                 [r[0] for r in rates[n]])
                for n in levels]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def table(name, rows):
    """The rows of `measure`. "vs 1 stream" divides the means; "per run"
    divides each repetition's rate by the single stream's of the same
    repetition (measured a few seconds apart, so a shared machine's slow
    and fast minutes cancel more than they do between the means) and
    gives their median and range."""
    base, base_all, base_runs = rows[0][1], rows[0][3], rows[0][5]
    print(f"\n{name}")
    print("| streams | aggregate decode t/s | per stream t/s | vs 1 stream "
          "| per run: median (range) | first to last token t/s | vs 1 stream |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n, mean, sd, mean_all, sd_all, runs in rows:
        ratios = [r / b for r, b in zip(runs, base_runs)]
        print(f"| {n} | {mean:.1f} ± {sd:.1f} | {mean / n:.1f} | {mean / base:.2f}x "
              f"| {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) "
              f"| {mean_all:.1f} ± {sd_all:.1f} | {mean_all / base_all:.2f}x |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model",
                    default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/kestrel"))
    ap.add_argument("--peer", help="a llama-server binary to measure the same way")
    ap.add_argument("-n", "--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--levels", default="1,2,4,8")
    ap.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    a = ap.parse_args()
    levels = [int(x) for x in a.levels.split(",")]
    slots, ctx = str(max(levels)), str(max(levels) * 1024)
    common = ["-m", a.model, "--port", "{port}", "-np", slots, "-c", ctx, "-t", str(a.threads)]
    print(f"model: {os.path.basename(a.model)}, {a.tokens} tokens per stream, "
          f"{a.threads} threads, {a.reps} runs per level")
    print(f"device: {a.device}")
    ours = measure([a.bin, "serve", "--device", a.device] + common, levels, a.tokens, a.reps)
    table("kestrel serve", ours)
    if a.peer:
        ngl = ["-ngl", "99" if a.device == "gpu" else "0"]
        peer = measure([a.peer] + common + ngl, levels, a.tokens, a.reps)
        table("llama-server", peer)
        print("\n| streams | kestrel / llama-server |\n|---:|---:|")
        for (n, k, *_), (_, p, *_) in zip(ours, peer):
            print(f"| {n} | {k / p:.2f} |")


if __name__ == "__main__":
    main()
