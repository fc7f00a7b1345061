#!/usr/bin/env python3
"""Hostile clients against the real `kestrel serve`, with the server's
memory watched throughout.

  scripts/soak.py mixed [-n 1000]    N mixed requests from 8 clients: normal
      and streamed generations, clients that leave mid-stream or before the
      answer, malformed and oversized bodies, long prompts. Reports RSS over
      time, every 5xx (a 503 for a full queue is documented and counted
      apart), requests that hung, and whether a seeded probe answers the same
      at the start and at the end.

  scripts/soak.py burst [--kinds ...] [--concurrency 16] [--size 2000000]
      For each pathological prompt kind, that many requests of SIZE bytes
      at once, with one normal request sent beside them: RSS before, at the
      peak and 10 s after, and the normal request's latency.

Both start `kestrel serve -np 4` on a free port (MODEL: --model, default
SmolLM2) from --kestrel (default target/release/kestrel) and stop it after.
Exits 1 when a `mixed` run breaks a rule: a 5xx other than those 503s, a
hang, the probe changed, or RSS after warm-up grown by more than 10%.
Everything goes to 127.0.0.1 only.
"""
import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    def __init__(self, kestrel, model, extra):
        self.port = free_port()
        cmd = [kestrel, "serve", "-m", model, "--host", "127.0.0.1",
               "--port", str(self.port), "-np", "4", "-t", "2"] + extra
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # Drain stderr so the server never blocks on a full pipe.
        self.log = []
        threading.Thread(target=self._drain, daemon=True).start()
        t0 = time.time()
        while time.time() - t0 < 120:
            if self.proc.poll() is not None:
                sys.exit("kestrel serve exited: " + "".join(self.log[-20:]))
            try:
                status, _ = request(self.port, "GET", "/health", None, timeout=2)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        sys.exit("kestrel serve did not become healthy")

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line.decode(errors="replace"))

    def rss_mb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def request(port, method, path, body, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        c.request(method, path, body=data, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


class RssWatch:
    """Samples the server's RSS every 50 ms in a thread."""

    def __init__(self, server):
        self.server, self.samples, self.stop_flag = server, [], False
        self.t0 = time.time()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop_flag:
            try:
                self.samples.append((time.time() - self.t0, self.server.rss_mb()))
            except OSError:
                return
            time.sleep(0.05)

    def peak_since(self, t):
        return max((r for (at, r) in self.samples if at >= t - self.t0), default=0.0)

    def stop(self):
        self.stop_flag = True
        self.thread.join()


PROBE = {"prompt": "Once upon a time", "n_predict": 16, "seed": 1234, "temperature": 0.9}


def probe(port):
    status, body = request(port, "POST", "/completion", PROBE)
    if status != 200:
        return f"<status {status}>"
    return json.loads(body)["content"]


# ---------------------------------------------------------------- burst

def pathological(kind, size, rng):
    """A prompt of about `size` bytes of one pathological kind."""
    if kind == "one-char":
        return "a" * size
    if kind == "no-spaces":
        alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.,;:!?/"
        return "".join(rng.choice(alphabet) for _ in range(size))
    if kind == "mixed-scripts":
        alphabet = "aéЖяΩ中文字한국ا ب्कि"
        alphabet = alphabet.replace(" ", "")
        out, n = [], 0
        while n < size:
            c = rng.choice(alphabet)
            out.append(c)
            n += len(c.encode())
        return "".join(out)
    if kind == "digits":
        return "".join(rng.choice("0123456789") for _ in range(size))
    if kind == "emoji-zwj":
        family = "\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466"
        return family * (size // len(family.encode()))
    if kind == "words":
        words = "the quick brown fox jumps over a lazy dog while seven wizards quietly".split()
        out, n = [], 0
        while n < size:
            w = rng.choice(words)
            out.append(w)
            n += len(w) + 1
        return " ".join(out)
    raise ValueError(kind)


KINDS = ["one-char", "no-spaces", "mixed-scripts", "digits", "emoji-zwj", "words"]


def burst(args):
    rng = random.Random(7)
    server = Server(args.kestrel, args.model, args.server_args)
    rows = []
    try:
        for kind in args.kinds:
            # UTF-8 as is (not \u escapes), so the body is the prompt's size.
            body = json.dumps({"prompt": pathological(kind, args.size, rng),
                               "n_predict": 4}, ensure_ascii=False).encode()
            request(server.port, "POST", "/completion", {"prompt": "Hi", "n_predict": 1})
            time.sleep(1.0)
            watch = RssWatch(server)
            time.sleep(0.2)
            before = server.rss_mb()
            t_start = time.time()
            statuses, lock = {}, threading.Lock()

            def heavy():
                try:
                    status, _ = request(server.port, "POST", "/completion", body, timeout=300)
                except OSError as e:
                    status = type(e).__name__
                with lock:
                    statuses[status] = statuses.get(status, 0) + 1

            threads = [threading.Thread(target=heavy) for _ in range(args.concurrency)]
            for t in threads:
                t.start()
            # The normal request goes once the heavy bodies are on their way.
            time.sleep(0.05)
            t0 = time.time()
            status, _ = request(server.port, "POST", "/completion",
                                {"prompt": "Hello", "n_predict": 1, "temperature": 0})
            normal_s = time.time() - t0
            for t in threads:
                t.join()
            burst_s = time.time() - t_start
            time.sleep(10)
            after = server.rss_mb()
            peak = watch.peak_since(t_start)
            watch.stop()
            rows.append((kind, len(body), statuses, before, peak, after, normal_s, status, burst_s))
    finally:
        server.stop()
    model = os.path.basename(args.model)
    print(f"\n{model}: {args.concurrency} concurrent bodies of ~{args.size} bytes "
          f"(server args: {' '.join(args.server_args) or '-'})")
    print("| kind | body bytes | answers | RSS before MB | peak growth MB | 10 s after, vs before MB | normal request s | burst s |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for kind, n, st, before, peak, after, normal_s, nst, bs in rows:
        answers = ", ".join(f"{k}x{v}" for k, v in sorted(st.items(), key=str))
        print(f"| {kind} | {n} | {answers} | {before:.0f} | {peak - before:+.0f} | "
              f"{after - before:+.0f} | {normal_s:.3f} ({nst}) | {bs:.1f} |")


# ---------------------------------------------------------------- mixed

def mixed_request(port, rng, n_ctx_hint):
    """One request of a random kind; returns (kind, status or error name)."""
    k = rng.randrange(12)
    if k <= 2:
        body = {"messages": [{"role": "user", "content": "Say something about the number %d." % rng.randrange(1000)}],
                "max_tokens": rng.randrange(1, 24), "temperature": rng.choice([0, 0.7]),
                "seed": rng.randrange(100)}
        return "chat", request(port, "POST", "/v1/chat/completions", body)[0]
    if k == 3:
        body = {"prompt": "Count: one, two,", "n_predict": 24, "stream": True}
        return "stream", stream_and_maybe_leave(port, body, leave_after=None)
    if k == 4:
        body = {"prompt": "Tell me a long story about a dragon.", "n_predict": 200, "stream": True}
        return "leave-mid-stream", stream_and_maybe_leave(port, body, leave_after=rng.randrange(1, 6))
    if k == 5:
        return "leave-before-answer", leave_before_answer(port, rng)
    if k == 6:
        junk = rng.choice([b"{", b"[]", b"null", b'{"prompt": 5}', b'{"messages": "x"}',
                           bytes(rng.randrange(256) for _ in range(64)), b'{"prompt": "\xff\xfe"}',
                           b'{"n_predict": -5, "prompt": []}', b"[" * 10000 + b"]" * 10000])
        return "malformed", request(port, "POST", rng.choice(["/completion", "/v1/chat/completions",
                                                                "/v1/completions", "/tokenize"]), junk)[0]
    if k == 7:
        words = "lorem ipsum dolor sit amet " * rng.randrange(10, 4000)
        return "long-prompt", request(port, "POST", "/v1/completions",
                                      {"prompt": words, "max_tokens": 2})[0]
    if k == 8:
        big = "x" * rng.randrange(300_000, 3_000_000)
        return "big-body", request(port, "POST", "/completion", {"prompt": big, "n_predict": 2})[0]
    if k == 9:
        return "oversized", oversized(port)
    if k == 10:
        return "tokenize", request(port, "POST", "/tokenize", {"content": "Hello world " * rng.randrange(1, 500)})[0]
    return "health", request(port, "GET", "/health", None)[0]


def stream_and_maybe_leave(port, body, leave_after):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        c.request("POST", "/completion", body=json.dumps(body).encode(),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200 or leave_after is None:
            r.read()
            return r.status
        for _ in range(leave_after):
            if not r.fp.readline():
                break
        c.sock.shutdown(socket.SHUT_RDWR)
        return r.status
    finally:
        c.close()


def leave_before_answer(port, rng):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    body = json.dumps({"prompt": "Write a poem.", "n_predict": 64}).encode()
    s.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(rng.random() * 0.2)
    s.close()
    return "left"


def oversized(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    n = 9 << 20
    s.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
              b"Content-Length: %d\r\n\r\n" % n)
    try:
        chunk = b"x" * 65536
        for _ in range(n // len(chunk)):
            s.sendall(chunk)
    except OSError:
        pass
    try:
        head = s.recv(64)
        return int(head.split()[1]) if head.startswith(b"HTTP/") else "no-answer"
    except (OSError, ValueError, IndexError):
        return "reset"
    finally:
        s.close()


def mixed(args):
    server = Server(args.kestrel, args.model, args.server_args)
    rng = random.Random(args.seed)
    counts, fives, hangs, lock = {}, [], [], threading.Lock()
    done = [0]
    try:
        first = probe(server.port)
        watch = RssWatch(server)
        t0 = time.time()
        warm_rss = [None]
        per_client = args.n // args.clients

        def client(i):
            crng = random.Random(args.seed * 1000 + i)
            for _ in range(per_client):
                started = time.time()
                try:
                    kind, status = mixed_request(server.port, crng, 0)
                except socket.timeout:
                    kind, status = "?", "timeout"
                except OSError as e:
                    kind, status = "?", type(e).__name__
                took = time.time() - started
                with lock:
                    counts[(kind, status)] = counts.get((kind, status), 0) + 1
                    if isinstance(status, int) and status >= 500 and status != 503:
                        fives.append((kind, status))
                    if status == "timeout" or took > 60:
                        hangs.append((kind, took))
                    done[0] += 1
                    if done[0] == args.warmup and warm_rss[0] is None:
                        warm_rss[0] = server.rss_mb()

        threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(2.0)
        end_rss = server.rss_mb()
        last = probe(server.port)
        watch.stop()
        elapsed = time.time() - t0
    finally:
        server.stop()
    alive = server.proc.returncode in (0, -15, None)
    print(f"\n{os.path.basename(args.model)}: {done[0]} requests from {args.clients} clients in {elapsed:.0f} s")
    print("| kind | answer | count |\n|---|---|---:|")
    for (kind, status), n in sorted(counts.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        print(f"| {kind} | {status} | {n} |")
    samples = watch.samples
    step = max(1, len(samples) // 12)
    print("\nRSS over time (s, MB): " + ", ".join(f"{t:.0f}:{r:.0f}" for t, r in samples[::step]))
    warm = warm_rss[0] or samples[0][1]
    growth = (end_rss - warm) / warm
    print(f"RSS after warm-up ({args.warmup} requests): {warm:.0f} MB; at the end: {end_rss:.0f} MB "
          f"({growth * 100:+.1f}%); peak {max(r for _, r in samples):.0f} MB")
    print(f"5xx other than 503: {len(fives)} {fives[:5]}; hangs: {len(hangs)} {hangs[:5]}")
    print(f"seeded probe: start {first!r}; end {last!r}; {'same' if first == last else 'DIFFERENT'}")
    ok = not fives and not hangs and first == last and growth < 0.10 and alive
    print("soak: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["mixed", "burst"])
    ap.add_argument("--kestrel", default=os.path.join(ROOT, "target", "release", "kestrel"))
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("-n", type=int, default=1000, help="mixed: requests in all")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=100, help="mixed: requests before the RSS baseline")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kinds", nargs="+", default=KINDS, choices=KINDS)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--size", type=int, default=2_000_000)
    ap.add_argument("--server-args", nargs=argparse.REMAINDER, default=[],
                    help="the rest goes to kestrel serve (e.g. -c 0)")
    args = ap.parse_args()
    if args.mode == "burst":
        burst(args)
        return 0
    return mixed(args)


if __name__ == "__main__":
    sys.exit(main())
