"""Starting and stopping `kestrel serve` for the acceptance scripts
(check-structured.py, check-gbnf.py), and the POSTs they send it.

The models go by short name (smollm2, gemma3, qwen2) or by path; the
binary is --kestrel, else $KESTREL_BIN, else target/release/kestrel.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
    "qwen2": "qwen2.5-coder-0.5b-q4_k_m.gguf",
}


def default_kestrel():
    return os.environ.get("KESTREL_BIN") or os.path.join(ROOT, "target", "release", "kestrel")


def model_path(name):
    if name in MODELS:
        return os.path.join(ROOT, "models", MODELS[name])
    return name


def add_server_args(ap):
    """The flags both scripts share."""
    ap.add_argument("--models", nargs="+", default=list(MODELS),
                    help="short names (%s) or GGUF paths; default all three" % ", ".join(MODELS))
    ap.add_argument("--kestrel", default=default_kestrel(),
                    help="the binary (default $KESTREL_BIN or target/release/kestrel)")
    ap.add_argument("--device", help="passed to `kestrel serve --device` (e.g. gpu)")
    ap.add_argument("-np", "--parallel", type=int, default=4,
                    help="server slots, and requests in flight at once (default 4)")
    # Off by default: a reused prompt prefix can change the sampled tokens
    # (seen with the server built with response_format), and an acceptance
    # run's counts should not depend on which request a slot served before.
    ap.add_argument("--cache-prompt", action="store_true",
                    help="let requests reuse cached prompt prefixes (default: cache_prompt false)")


class Server:
    """`kestrel serve` on a free loopback port, up until stop()."""

    def __init__(self, args, model):
        self.model = model
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        cmd = [args.kestrel, "serve", "-m", model_path(model), "--host", "127.0.0.1",
               "--port", str(self.port), "-t", "2", "-np", str(args.parallel)]
        if args.device:
            cmd += ["--device", args.device]
        if not os.path.exists(cmd[0]):
            sys.exit(f"no kestrel binary at {cmd[0]} (build it, or set --kestrel / KESTREL_BIN)")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # Drained so that the server never blocks on a full pipe; kept for
        # the message when it dies.
        self.log = []
        threading.Thread(target=self._drain, daemon=True).start()
        deadline = time.time() + 300
        while True:
            if self.proc.poll() is not None:
                time.sleep(0.2)
                sys.exit(f"kestrel serve exited ({self.proc.returncode}):\n" + "".join(self.log[-20:]))
            try:
                with urllib.request.urlopen(self.url("/health"), timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.time() > deadline:
                self.stop()
                sys.exit("kestrel serve did not become healthy within 300 s")
            time.sleep(0.25)

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line.decode("utf-8", "replace"))

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def post(self, path, body, timeout=900):
        """(status, parsed JSON or the raw text)."""
        req = urllib.request.Request(self.url(path), data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode("utf-8", "replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def error_text(body):
    """The message of an error body, or the body itself."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message"))
    return str(body)[:300]
