"""Starts the real `mla serve` on a free loopback port for the server tests, and small HTTP
helpers on the Python standard library (http.client, raw sockets) for what the openai client
hides: status lines, headers, SSE framing, half-sent requests.
"""
import http.client
import json
import os
import re
import signal
import subprocess
import threading
import time


class MlaServer:
    """`mla serve -m MODEL --port 0 ARGS...` (model None: no -m, the bundled default); the port
    is read from its "listening on" line. launcher: (argv prefix, env) that starts it, e.g.
    mpirun across ranks (tests/e2e/mpi_launch.py)."""

    def __init__(self, binary, model, *args, ready_timeout=60.0, launcher=None):
        self.binary, self.model = binary, model
        # FP32 weight products and attention unless a test asks otherwise: the server tests
        # compare replies under load with single-request baselines (to their FP32-derived
        # near-tie gap), and the default BF16 products make a row's result depend on how many
        # rows share its product (> 16 rows take BF16).
        if "--matmul-dtype" not in args:
            args = ("--matmul-dtype", "f32", *args)
        if "--attention-dtype" not in args:
            args = ("--attention-dtype", "f32", *args)
        model_args = ["-m", model] if model is not None else []
        prefix, env = launcher or ([], None)
        self.launched = launcher is not None
        self.proc = subprocess.Popen([*prefix, binary, "serve", *model_args, "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=env)
        self.log = []
        self.port = None
        deadline = time.time() + ready_timeout
        while self.port is None:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("mla serve exited before listening: " + "".join(self.log))
            self.log.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
            if time.time() > deadline:
                raise RuntimeError("mla serve did not start listening")
        # Keep draining stderr so the server never blocks on a full pipe.
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        self.base_url = f"http://127.0.0.1:{self.port}"
        while time.time() < deadline:
            status, _, _ = self.request("GET", "/health")
            if status == 200:
                break
            if self.proc.poll() is not None:
                raise RuntimeError("mla serve exited while loading: " + "".join(self.log))
            time.sleep(0.05)
        else:
            raise RuntimeError("mla serve did not become ready")
        _, _, body = self.request("GET", "/v1/models", headers=self.auth_headers(args))
        self.model_id = json.loads(body)["data"][0]["id"]

    @staticmethod
    def auth_headers(args):
        args = list(args)
        if "--api-key" in args:
            return {"Authorization": "Bearer " + args[args.index("--api-key") + 1]}
        return {}

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def request(self, method, path, body=None, headers=None, timeout=60):
        """(status, headers dict with lower-case names, body bytes); body may be a dict (JSON)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            hdrs = dict(headers or {})
            if isinstance(body, (dict, list)):
                body = json.dumps(body)
                hdrs.setdefault("Content-Type", "application/json")
            conn.request(method, path, body=body, headers=hdrs)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        except (ConnectionError, OSError):
            return None, {}, b""
        finally:
            conn.close()

    def post_json(self, path, body, headers=None):
        status, hdrs, raw = self.request("POST", path, body, headers)
        return status, hdrs, (json.loads(raw) if raw else None)

    def metrics(self, headers=None):
        """The /metrics samples as {"name" or "name{label=\"v\",...}": value}, model_name and
        histogram buckets left out."""
        _, _, raw = self.request("GET", "/metrics", headers=headers)
        out = {}
        for line in raw.decode().splitlines():
            if line.startswith("#") or not line.strip():
                continue
            series, value = line.rsplit(" ", 1)
            name, _, labels = series.partition("{")
            if name.endswith("_bucket"):
                continue
            kept = [l for l in re.findall(r'(\w+="[^"]*")', labels)
                    if not l.startswith("model_name=")]
            out[name + ("{" + ",".join(kept) + "}" if kept else "")] = float(value)
        return out

    def wait_idle(self, timeout=5.0, headers=None):
        """Waits until no request runs or waits and no KV page is held; returns the metrics."""
        deadline = time.time() + timeout
        while True:
            m = self.metrics(headers)
            if (m.get("vllm:num_requests_running", 1) == 0 and
                    m.get("vllm:num_requests_waiting", 1) == 0 and
                    m.get("vllm:kv_cache_blocks_used", 1) == 0 and
                    m.get("vllm:http_requests_in_flight", 1) == 0):
                return m
            if time.time() > deadline:
                raise AssertionError(f"server not idle after {timeout} s: {m}")
            time.sleep(0.02)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Signals the server and returns its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("mla serve did not exit after the signal")
        self._reader.join(timeout=5)
        return self.proc.returncode


def sse_events(raw):
    """Splits an SSE body into its data payloads, checking the framing on the way: every event is
    exactly one `data: ` line followed by a blank line."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    assert text.endswith("\n\n"), f"stream does not end with a blank line: {text[-80:]!r}"
    events = []
    for block in text[:-2].split("\n\n"):
        assert block.startswith("data: ") and "\n" not in block, f"bad SSE event {block!r}"
        events.append(block[len("data: "):])
    return events


def find_binary_and_model(argv):
    """argv: [script, MLA_BINARY, MODEL_DIR]; env MLA_BINARY/MLA_MODEL as fallbacks."""
    binary = argv[1] if len(argv) > 1 else os.environ.get("MLA_BINARY", "build/release/bin/mla")
    model = argv[2] if len(argv) > 2 else os.environ.get("MLA_MODEL",
                                                         "build/release/models/tiny-v3")
    return binary, model
