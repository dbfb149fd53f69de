"""Shared pieces of the load and fault tests (docs/RELIABILITY.md §Checklist L1-L12, load_test.py
and fault_test.py): the two sizes (CI by default, the full checklist sizes with MLA_LOAD_FULL=1),
a reproducible greedy workload and its single-request baseline, a threaded client pool, a
single-threaded raw-socket client whose timestamps are not disturbed by the GIL (burst and
closed-loop), the leak check (KV blocks, fds, RSS), the R35-R46 bad-request catalogue (poison
requests of L9, seeds of L8) and the raw HTTP request mutator of L8.

Everything here is Python standard library.
"""
import copy
import http.client
import json
import os
import random
import re
import selectors
import socket
import threading
import time

FULL = os.environ.get("MLA_LOAD_FULL") == "1"


def scaled(ci, full):
    """The CI size by default, the full size of docs/RELIABILITY.md §Checklist with
    MLA_LOAD_FULL=1."""
    return full if FULL else ci


def percentile(xs, p):
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    s = sorted(xs)
    if not s:
        return float("nan")
    k = max(0, min(len(s) - 1, int(-(-p * len(s) // 100)) - 1))
    return s[k]


def log(*args):
    print(*args, flush=True)


# --- process figures ---------------------------------------------------------------------------

def proc_status(pid):
    """VmRSS, VmHWM, VmSize, Threads of a process from /proc, in bytes (Threads as a count)."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM", "VmSize", "VmPeak"):
                    out[k] = int(v.split()[0]) * 1024
                elif k == "Threads":
                    out[k] = int(v)
    except OSError:
        pass
    return out


def open_fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


# --- the workload and its baseline -------------------------------------------------------------

# Token ids of the tiny models (vocab 320 for every make-tiny family) kept clear of the first few
# ids (bos/eos/pad) so a prompt never ends early; the prompt length is then exact.
TOKEN_LO, TOKEN_HI = 3, 300
WORDS = ("alpha beta gamma delta kv cache page block latent rope expert router token stream "
         "server client queue slot decode prefill shard tensor").split()


class Spec:
    """One greedy request of the workload: completions with token ids, or chat with text."""

    def __init__(self, idx, endpoint, prompt, max_tokens, stream):
        self.idx, self.endpoint, self.prompt = idx, endpoint, prompt
        self.max_tokens, self.stream = max_tokens, stream

    def body(self, model_id):
        # Token ids come back in the logprobs (named "token_id:N"), so outputs are compared id by
        # id: invalid UTF-8 bytes all read U+FFFD in the text, where a difference can hide.
        b = {"model": model_id, "max_tokens": self.max_tokens, "temperature": 0,
             "ignore_eos": True, "stream": self.stream, "return_tokens_as_token_ids": True}
        if self.endpoint == "chat":
            b.update(logprobs=True, top_logprobs=0)
        else:
            b["logprobs"] = 0
        if self.endpoint == "chat":
            b["messages"] = [{"role": "user", "content": self.prompt}]
        else:
            b["prompt"] = self.prompt
        return b

    @property
    def path(self):
        return "/v1/chat/completions" if self.endpoint == "chat" else "/v1/completions"

    def __repr__(self):
        n = len(self.prompt)
        return f"Spec#{self.idx}({self.endpoint}, prompt {n}, max_tokens {self.max_tokens}, " \
               f"stream {self.stream})"


def make_specs(n, seed, prompt_len=(16, 256), max_tokens=(8, 64), chat_share=0.25,
               stream_share=0.5):
    """n request specs: prompts of prompt_len tokens (chat: about as many characters / 4 words),
    max_tokens in the range, greedy, ignore_eos (so each output has exactly max_tokens tokens)."""
    rng = random.Random(seed)
    specs = []
    for i in range(n):
        plen = rng.randint(*prompt_len)
        mt = rng.randint(*max_tokens)
        stream = rng.random() < stream_share
        if rng.random() < chat_share:
            # The tiny byte-level BPE has few merges: about 0.8 tokens per character.
            words = []
            while sum(len(w) + 1 for w in words) < plen:
                words.append(rng.choice(WORDS))
            specs.append(Spec(i, "chat", " ".join(words), mt, stream))
        else:
            specs.append(Spec(i, "completions",
                              [rng.randrange(TOKEN_LO, TOKEN_HI) for _ in range(plen)], mt, stream))
    return specs


class Output(str):
    """A response's generated text, with its token ids when the request asked for them."""
    ids = None


def _ids_of(chat, logprobs):
    if not logprobs:
        return []
    names = ([t["token"] for t in logprobs.get("content") or []] if chat
             else logprobs.get("tokens") or [])
    return [int(n.split(":")[1]) for n in names if n.startswith("token_id:")]


def parse_output(spec_or_endpoint, stream, raw):
    """The generated text of a 200 response (non-streamed JSON or an SSE stream), with .ids when
    the response carried token-id logprobs; raises on a malformed body."""
    chat = (spec_or_endpoint.endpoint if isinstance(spec_or_endpoint, Spec)
            else spec_or_endpoint) == "chat"
    ids = []
    if not stream:
        j = json.loads(raw)
        c = j["choices"][0]
        out = Output(c["message"]["content"] if chat else c["text"])
        ids = _ids_of(chat, c.get("logprobs"))
    else:
        text = raw.decode()
        assert text.endswith("data: [DONE]\n\n"), f"stream does not end with [DONE]: {text[-200:]!r}"
        parts = []
        for block in text[:-2].split("\n\n"):
            assert block.startswith("data: "), f"bad SSE event {block[:100]!r}"
            payload = block[6:]
            if payload == "[DONE]":
                continue
            j = json.loads(payload)
            assert "error" not in j, f"error event in stream: {payload[:300]}"
            for c in j.get("choices", []):
                parts.append((c["delta"].get("content") if chat else c.get("text")) or "")
                ids += _ids_of(chat, c.get("logprobs"))
        out = Output("".join(parts))
    out.ids = ids or None
    return out


def send(port, spec, model_id, timeout=300):
    """One request over http.client: (status, text or None, seconds, error text)."""
    t0 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", spec.path, body=json.dumps(spec.body(model_id)),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        raw = r.read()
        dt = time.monotonic() - t0
        if r.status != 200:
            return r.status, None, dt, raw[:300].decode(errors="replace")
        try:
            return 200, parse_output(spec, spec.stream, raw), dt, ""
        except (AssertionError, ValueError, KeyError) as e:
            return 200, None, dt, f"bad body: {e}"
    except (OSError, http.client.HTTPException) as e:
        return None, None, time.monotonic() - t0, f"{type(e).__name__}: {e}"
    finally:
        conn.close()


# Batched and single-request decoding add the same products in different orders (weight-product
# blocking by batch size), so two candidates whose logits are closer than that reordering error
# can swap. The engine's tests bound it at 2e-3 * max(1, |logit|) per logit (forward_test; see
# tests/unit/sched/engine_test_util.h); the tiny models' logits stay below 5 in magnitude (3.85
# on tiny-v3: the largest |x| of `logits` in `mla generate -m tiny-v3 -p ... --dump-activations
# DIR`), so a top-2 logprob gap under 0.01 (logprob gaps equal logit gaps) is a
# near-tie. Outputs must be equal, or first differ at a token where the single-request baseline
# itself had such a near-tie; the continuations after it are not compared.
NEAR_TIE = 0.01
NEAR_TIES_SEEN = []  # (spec, byte offset, gap) of every accepted divergence, for the reports


class Expected(str):
    """A baseline output (compares as its text) with its token ids and the gap between the top
    two logprobs at each token."""
    ids, gaps = (), ()


def _with_gaps(spec, body):
    c = json.loads(body)["choices"][0]
    out = Expected(c["message"]["content"] if spec.endpoint == "chat" else c["text"])
    lp = c.get("logprobs") or {}
    ids, gaps = [], []
    if spec.endpoint == "chat":
        for t in lp.get("content") or []:
            ids.append(int(t["token"].split(":")[1]))
            top = sorted((x["logprob"] for x in t.get("top_logprobs") or []), reverse=True)
            gaps.append(top[0] - top[1] if len(top) > 1 else float("inf"))
    else:
        for name, top in zip(lp.get("tokens") or [], lp.get("top_logprobs") or []):
            ids.append(int(name.split(":")[1]))
            vals = sorted((top or {}).values(), reverse=True)
            gaps.append(vals[0] - vals[1] if len(vals) > 1 else float("inf"))
    out.ids, out.gaps = tuple(ids), tuple(gaps)
    return out


def greedy_equal(spec, expected, got):
    """got equals the baseline, or its token ids first differ at a token where the baseline had
    a near-tie (see NEAR_TIE); the continuations after it are not compared."""
    if got is None:
        return False
    ids = getattr(got, "ids", None)
    if not isinstance(expected, Expected) or not expected.ids or not ids:
        return str(got) == str(expected)
    k = next((n for n, (x, y) in enumerate(zip(expected.ids, ids)) if x != y), None)
    if k is None:
        return len(ids) == len(expected.ids) and str(got) == str(expected)
    if expected.gaps[k] < NEAR_TIE:
        NEAR_TIES_SEEN.append((spec, k, expected.gaps[k]))
        return True
    return False


def baseline(server, specs):
    """The single-request outputs: each spec alone, one after the other, with their top-2
    logprobs (Expected) so that a later divergence can be checked for a near-tie."""
    out = {}
    for s in specs:
        body = s.body(server.model_id)
        body["stream"] = False
        # Tokens named by id: the legacy top_logprobs is keyed by token text, where two invalid
        # bytes both read "\ufffd" and one would hide the other.
        body["return_tokens_as_token_ids"] = True
        if s.endpoint == "chat":
            body.update(logprobs=True, top_logprobs=2)
        else:
            body["logprobs"] = 2
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
        try:
            conn.request("POST", s.path, body=json.dumps(body),
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            raw = r.read()
        finally:
            conn.close()
        assert r.status == 200, f"baseline {s}: {r.status} {raw[:300]!r}"
        out[s.idx] = _with_gaps(s, raw)
    return out


class LoadResult:
    def __init__(self):
        self.lock = threading.Lock()
        self.statuses = {}
        self.latencies = []
        self.mismatches = []
        self.errors = []
        self.count = 0

    def add(self, spec, status, text, dt, err, expected):
        with self.lock:
            self.count += 1
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if status == 200 and text is not None:
                self.latencies.append(dt)
                if expected is not None and not greedy_equal(spec, expected, text):
                    i = next((k for k, (a, b) in enumerate(zip(expected, text)) if a != b),
                             min(len(expected), len(text)))
                    self.mismatches.append(
                        (spec, f"first difference at character {i} of {len(expected)}",
                         expected[max(0, i - 10):i + 30], text[max(0, i - 10):i + 30]))
            else:
                self.errors.append((spec, status, err))

    def summary(self):
        lat = self.latencies
        return (f"{self.count} requests, statuses {self.statuses}, "
                f"{len(self.mismatches)} mismatches, {len(self.errors)} errors, "
                f"p50 {percentile(lat, 50):.3f} s, p99 {percentile(lat, 99):.3f} s")


def run_load(server, specs, base, threads, per_thread=None, until=None, seed=0, result=None):
    """threads clients, each sending per_thread requests (or until the monotonic time `until`)
    drawn from specs; outputs compared with base. Returns the LoadResult."""
    res = result or LoadResult()

    def worker(k):
        rng = random.Random(seed * 1000 + k)
        n = 0
        while (per_thread is not None and n < per_thread) or \
                (until is not None and time.monotonic() < until):
            s = rng.choice(specs)
            status, text, dt, err = send(server.port, s, server.model_id)
            res.add(s, status, text, dt, err, base.get(s.idx))
            n += 1

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return res


# --- idle and leak checks ----------------------------------------------------------------------

def settle(server, base_fds, fd_tolerance, timeout=5.0):
    """Waits until the server is idle (nothing running, waiting or in flight, no KV page used),
    free + cached_idle == total, and open fds <= base_fds + fd_tolerance. Returns the metrics;
    raises AssertionError naming what did not come back."""
    deadline = time.monotonic() + timeout
    while True:
        m = server.metrics()
        used = m.get("vllm:kv_cache_blocks_used", -1)
        free = m.get("vllm:kv_cache_blocks_free", -1)
        cached = m.get("vllm:kv_cache_blocks_cached_idle", 0)
        total = m.get("vllm:kv_cache_blocks_total", -2)
        fds = m.get("process_open_fds", 1e9)
        ok = (m.get("vllm:num_requests_running", 1) == 0 and
              m.get("vllm:num_requests_waiting", 1) == 0 and
              m.get("vllm:http_requests_in_flight", 1) == 0 and
              used == 0 and free + cached == total and fds <= base_fds + fd_tolerance)
        if ok:
            return m
        if time.monotonic() > deadline:
            raise AssertionError(
                f"server did not come back to idle within {timeout} s: used {used}, free {free}, "
                f"cached_idle {cached}, total {total}, fds {fds} (baseline {base_fds} + "
                f"{fd_tolerance}), running {m.get('vllm:num_requests_running')}, waiting "
                f"{m.get('vllm:num_requests_waiting')}, in flight "
                f"{m.get('vllm:http_requests_in_flight')}")
        time.sleep(0.05)


def baseline_fds(server):
    """Open fds of the idle server as /metrics reports them (the scrape's own connection is
    counted, as it is in every later scrape)."""
    time.sleep(0.2)
    return server.metrics()["process_open_fds"]


# --- a raw single-threaded client ----------------------------------------------------------------

def http_bytes(method, path, body=None, headers=None, close=True):
    hdrs = {"Host": "127.0.0.1"}
    if body is not None:
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
            hdrs["Content-Type"] = "application/json"
        if isinstance(body, str):
            body = body.encode()
        hdrs["Content-Length"] = str(len(body))
    if close:
        hdrs["Connection"] = "close"
    hdrs.update(headers or {})
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items())
    return head.encode() + b"\r\n" + (body or b"")


class Exchange:
    """One Connection: close request on a non-blocking socket; times of send, first byte, EOF."""

    def __init__(self, port, data, tag=None):
        self.data, self.tag = data, tag
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setblocking(False)
        self.buf = b""
        self.t_sent = self.t_first = self.t_end = None
        self.error = None

    @property
    def status(self):
        m = re.match(rb"HTTP/1\.[01] (\d{3}) ", self.buf)
        return int(m.group(1)) if m else None

    @property
    def body(self):
        return self.buf.partition(b"\r\n\r\n")[2]

    def header(self, name):
        head = self.buf.partition(b"\r\n\r\n")[0].decode(errors="replace")
        for line in head.split("\r\n")[1:]:
            k, _, v = line.partition(":")
            if k.strip().lower() == name.lower():
                return v.strip()
        return None


def run_exchanges(exchanges, timeout):
    """Sends every exchange's bytes back to back, then reads all answers to EOF on one thread
    (selectors), timestamping the first byte and the end of each. Bounded by timeout."""
    sel = selectors.DefaultSelector()
    for ex in exchanges:
        ex.t_sent = time.monotonic()
        try:
            ex.sock.setblocking(True)
            ex.sock.sendall(ex.data)
            ex.sock.setblocking(False)
            sel.register(ex.sock, selectors.EVENT_READ, ex)
        except OSError as e:
            ex.error = str(e)
            ex.t_end = time.monotonic()
            ex.sock.close()
    deadline = time.monotonic() + timeout
    pending = len(sel.get_map())
    while pending and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.1):
            ex = key.data
            now = time.monotonic()
            try:
                b = ex.sock.recv(1 << 16)
            except BlockingIOError:
                continue
            except OSError as e:
                b, ex.error = b"", str(e)
            if b and ex.t_first is None:
                ex.t_first = now
            ex.buf += b
            if not b:
                ex.t_end = now
                sel.unregister(ex.sock)
                ex.sock.close()
                pending -= 1
    for key in list(sel.get_map().values()):
        key.data.error = "timeout"
        sel.unregister(key.fileobj)
        key.fileobj.close()
    sel.close()
    return exchanges


# --- the R35-R46 bad requests -------------------------------------------------------------------

class Bad:
    """A bad request of docs/RELIABILITY.md §Checklist R35-R46 and the statuses that may answer
    it. `raw` requests are sent as bytes over a socket (framing and header classes); the others as
    JSON."""

    def __init__(self, name, expect, method="POST", path="/v1/chat/completions", body=None,
                 headers=None, raw=None):
        self.name, self.expect, self.method, self.path = name, set(expect), method, path
        self.body, self.headers, self.raw = body, headers or {}, raw

    def to_bytes(self):
        if self.raw is not None:
            return self.raw
        return http_bytes(self.method, self.path, self.body, self.headers)


def bad_requests(model_id, max_model_len):
    """The R35-R46 catalogue (R35-R43, R46 without the auth and queue items, which need their own
    server flags): every entry must get one of its statuses and an OpenAI error envelope."""
    M = model_id
    msgs = [{"role": "user", "content": "hi"}]

    def chat(**kw):
        b = {"model": M, "messages": msgs, "max_tokens": 2}
        b.update(kw)
        return b

    def comp(**kw):
        b = {"model": M, "prompt": "hi", "max_tokens": 2}
        b.update(kw)
        return b

    out = []
    # 35: body framing and encodings.
    out.append(Bad("content-length over the cap", {413}, raw=(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 104857600\r\nConnection: close\r\n\r\n")))
    out.append(Bad("gzip body", {415}, path="/v1/completions", body=b"\x1f\x8b\x08\x00junk",
                   headers={"Content-Encoding": "gzip", "Content-Type": "application/json"}))
    out.append(Bad("TE and CL", {400}, raw=(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n")))
    # Chunked bodies: 400 (R35) or 411 (mla serve refuses every body without a plain
    # Content-Length before reading it, docs/SERVING.md).
    out.append(Bad("negative chunk size", {400, 411}, raw=(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        b"Connection: close\r\n\r\n-5\r\nhello\r\n0\r\n\r\n")))
    out.append(Bad("overlong hex chunk size", {400, 411}, raw=(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        b"Connection: close\r\n\r\n" + b"f" * 40 + b"\r\nhello\r\n0\r\n\r\n")))
    # 36: header limits.
    out.append(Bad("101 headers", {431}, raw=b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(
        b"X-H%d: y\r\n" % i for i in range(101)) + b"Connection: close\r\n\r\n"))
    out.append(Bad("20 KiB of headers", {431}, raw=b"GET /health HTTP/1.1\r\nHost: x\r\n" +
                   b"".join(b"X-H%d: %s\r\n" % (i, b"b" * 1000) for i in range(20)) +
                   b"Connection: close\r\n\r\n"))
    out.append(Bad("9 KiB request line", {414}, raw=b"GET /health?" + b"a" * 9000 +
                   b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
    # 37: malformed JSON.
    for i, text in enumerate(['{"model": ', '{"a": 1} trailing', '[1, 2]', '{"a": 1, "a": 2}',
                              "[" * 100 + "]" * 100, '{"x":' * 70 + "1" + "}" * 70,
                              '{"model": "' + M + '", "prompt": "x", "max_tokens": NaN}',
                              b'\xff\xfe{"a": 1}']):
        out.append(Bad(f"malformed json {i}", {400}, path="/v1/completions", body=text,
                       headers={"Content-Type": "application/json"}))
    # 38: wrong types.
    for field, value in [("max_tokens", "abc"), ("temperature", "hot"), ("messages", "hi"),
                         ("stream", "yes"), ("top_k", 1.5), ("seed", "x"), ("stop", 5)]:
        out.append(Bad(f"type {field}", {400}, body=chat(**{field: value})))
    # 39: out of range.
    for field, value in [("max_tokens", 0), ("max_tokens", -5), ("n", 17), ("best_of", 17), ("prompt_logprobs", 21),
                         ("temperature", -1), ("temperature", 2.5), ("top_p", 0), ("top_p", 1.5),
                         ("top_k", -2), ("top_k", 10 ** 6), ("min_p", 2),
                         ("presence_penalty", 3), ("frequency_penalty", -2.5),
                         ("n_discard", -1), ("n_keep", -1), ("stop", ["a", "b", "c", "d", "e"]),
                         ("stop", ["x" * 300]), ("logit_bias", {"abc": 1}),
                         ("logit_bias", {"-1": 1}), ("logit_bias", {"100000": 1}),
                         ("logit_bias", {"5": 101})]:
        out.append(Bad(f"range {field}={str(value)[:20]}", {400}, body=chat(**{field: value})))
    out.append(Bad("top_logprobs 21", {400}, body=chat(logprobs=True, top_logprobs=21)))
    out.append(Bad("legacy logprobs 21", {400}, path="/v1/completions", body=comp(logprobs=21)))
    # 40: token ids.
    for prompt in ([-1], [10 ** 9], [1, "a"], [[1], "a"], [], [1.5]):
        out.append(Bad(f"prompt ids {str(prompt)[:20]}", {400}, path="/v1/completions",
                       body=comp(prompt=prompt)))
    # 41: context.
    out.append(Bad("prompt over max_model_len", {400}, path="/v1/completions",
                   body=comp(prompt=[5] * (max_model_len + 10))))
    out.append(Bad("prompt + max_tokens over max_model_len", {400}, path="/v1/completions",
                   body=comp(prompt=[5] * 8, max_tokens=max_model_len + 10)))
    # 42: messages, model, routes, methods.
    for messages in ([], [{"role": "wizard", "content": "x"}], [{"role": "user"}],
                     [{"role": "user", "content": [{"type": "image_url",
                                                     "image_url": {"url": "x"}}]}], [5]):
        out.append(Bad(f"messages {str(messages)[:30]}", {400}, body=chat(messages=messages)))
    out.append(Bad("unknown model", {404}, body=chat(model="nope")))
    out.append(Bad("unknown path", {404}, path="/v2/nothing", body=chat()))
    out.append(Bad("wrong method", {405}, method="GET", path="/v1/completions"))
    # 43: pass-through knobs; refused fields.
    out.append(Bad("chat_template_kwargs", {400}, body=chat(chat_template_kwargs={"x": True})))
    out.append(Bad("suffix", {400}, path="/v1/completions", body=comp(suffix="x")))
    out.append(Bad("streamed best_of above n", {400}, body=chat(n=1, best_of=2, stream=True)))
    out.append(Bad("use_beam_search", {400}, body=chat(use_beam_search=True)))
    return out


def exchange_one(port, data, timeout=10.0, half_close=False):
    """Sends bytes on a fresh connection and reads to EOF (or timeout); returns the bytes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        out = b""
        while True:
            try:
                b = s.recv(65536)
            except socket.timeout:
                return out + b"<timeout>"
            except ConnectionResetError:
                return out
            if not b:
                return out
            out += b
    except (ConnectionResetError, BrokenPipeError):
        return b""
    finally:
        s.close()


def read_response(port, data, timeout=15.0):
    """Sends bytes on a fresh connection and reads one response: until its Content-Length body is
    complete, or EOF, or timeout. Returns (bytes, seconds to the first byte or None, closed)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    t0 = time.monotonic()
    first = None
    out = b""
    try:
        s.sendall(data)
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                b = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                return out, first, True
            if not b:
                return out, first, True
            if first is None:
                first = time.monotonic() - t0
            out += b
            head, sep, body = out.partition(b"\r\n\r\n")
            if sep:
                m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
                if m and len(body) >= int(m.group(1)):
                    return out, first, False
        return out, first, False
    except (ConnectionResetError, BrokenPipeError):
        return out, first, True
    finally:
        s.close()


def check_bad(port, bad, timeout=15.0):
    """Sends one bad request; returns (None or a description of what was wrong, seconds to the
    answer). Right: one of the expected statuses with a well-formed OpenAI error envelope."""
    out, first, _ = read_response(port, bad.to_bytes(), timeout)
    m = re.match(rb"HTTP/1\.1 (\d{3}) ", out)
    if not m:
        return f"{bad.name}: no status line within {timeout} s: {out[:120]!r}", first
    status = int(m.group(1))
    if status not in bad.expect:
        return f"{bad.name}: status {status}, expected {sorted(bad.expect)}: {out[:300]!r}", first
    body = out.partition(b"\r\n\r\n")[2]
    try:
        err = json.loads(body)["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["message"]
    except (ValueError, KeyError, AssertionError, TypeError):
        return (f"{bad.name}: status {status} without an OpenAI error envelope: {body[:200]!r}",
                first)
    return None, first


# --- the protocol mutator of L8 ------------------------------------------------------------------

INTERESTING = [0, -1, 1, 2 ** 31, 2 ** 63, -2 ** 63, 2 ** 64, 1e308, -1e308, 1.5, "", "x" * 300,
               None, True, False, [], {}, [[]], {"a": {"b": {}}}, "\u0000", "\ud7ff\ue000",
               "<｜end▁of▁sentence｜>", [1, 2, 3], [-1], "\r\n\x1b[31m"]
METHODS = [b"GET", b"POST", b"PUT", b"DELETE", b"HEAD", b"OPTIONS", b"PATCH", b"CONNECT",
           b"TRACE", b"BREW", b"G\x00T", b""]
PATHS = [b"/v1/completions", b"/v1/chat/completions", b"/tokenize", b"/detokenize",
         b"/v1/models", b"/metrics", b"/health", b"/", b"*", b"/../../etc/passwd",
         b"/v1/completions?x=1", b"//v1//completions", b"/%00", b"http://x/v1/completions",
         b"/v1/completions#frag", b"/" + b"a" * 9000]
HEADER_LINES = [b"Transfer-Encoding: chunked", b"Transfer-Encoding: gzip, chunked",
                b"Content-Length: -1", b"Content-Length: 99999999999999999999",
                b"Content-Length: 1, 2", b"Content-Length: abc", b"Content-Encoding: gzip",
                b"Content-Encoding: identity", b"Expect: 100-continue", b"Connection: keep-alive",
                b"Connection: upgrade", b"Upgrade: h2c", b"Host:", b"X-Empty:",
                b" folded-continuation", b"NoColonHere", b"\x00: \x00", b"X-Long: " + b"v" * 9000,
                b"Authorization: Bearer x", b"Range: bytes=0-1", b"Content-Type: text/plain"]


def _mutate_json(rng, value, depth=0):
    if isinstance(value, dict) and value and rng.random() < 0.7:
        k = rng.choice(list(value))
        op = rng.random()
        if op < 0.15:
            del value[k]
        elif op < 0.25:
            value[rng.choice(["max_tokens", "n", "stream", "logprobs", "top_logprobs", "stop",
                              "logit_bias", "echo", "prompt", "messages", "seed", "top_k",
                              "temperature", "x" * rng.randint(1, 40)])] = copy.deepcopy(rng.choice(INTERESTING))
        else:
            value[k] = _mutate_json(rng, value[k], depth + 1)
        return value
    if isinstance(value, list) and value and rng.random() < 0.7:
        i = rng.randrange(len(value))
        op = rng.random()
        if op < 0.2:
            del value[i]
        elif op < 0.35:
            value.append(copy.deepcopy(rng.choice(INTERESTING)))
        else:
            value[i] = _mutate_json(rng, value[i], depth + 1)
        return value
    return copy.deepcopy(rng.choice(INTERESTING))


def _bounded(body):
    """Keeps a mutated JSON request cheap to serve (the fuzz is about parsing, not decoding)."""
    if isinstance(body, dict):
        mt = body.get("max_tokens")
        if isinstance(mt, int) and not isinstance(mt, bool) and mt > 16:
            body["max_tokens"] = 16
        if "max_tokens" not in body and "max_completion_tokens" not in body:
            body["max_tokens"] = 4
    return body


class Mutator:
    """Mutated raw HTTP requests from seeds (the R35-R46 catalogue plus valid requests). Half keep
    the HTTP framing and mutate the JSON body (Content-Length fixed up); half mutate the bytes or
    the request line and headers (then the client half-closes after sending, so that a request left
    incomplete ends at once instead of at the 10 s read timeout)."""

    def __init__(self, seeds, seed):
        self.rng = random.Random(seed)
        self.seeds = seeds  # list of (method, path, body dict/str/None, headers)

    def next(self):
        """(bytes, half_close)."""
        rng = self.rng
        seed = rng.choice(self.seeds)
        if isinstance(seed, bytes):  # a raw seed (framing and header classes, R35-R36)
            method = path = headers = None
            body = seed
        else:
            method, path, body, headers = seed
        if rng.random() < 0.5 and isinstance(body, (dict, list)):
            b = json.loads(json.dumps(body))
            for _ in range(rng.randint(1, 3)):
                b = _mutate_json(rng, b)
            b = _bounded(b)
            try:
                text = json.dumps(b, allow_nan=False)
            except (ValueError, OverflowError):
                text = json.dumps(b)
            if rng.random() < 0.2:  # byte-level damage inside a correctly framed body
                raw = bytearray(text.encode())
                for _ in range(rng.randint(1, 4)):
                    if raw:
                        raw[rng.randrange(len(raw))] = rng.randrange(256)
                text = bytes(raw)
            return http_bytes(method, path, text, headers), False
        if method is None:
            data = body
        else:
            data = http_bytes(method, path, _bounded(json.loads(json.dumps(body)))
                              if isinstance(body, (dict, list)) else body, headers)
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        for _ in range(rng.randint(1, 3)):
            op = rng.randrange(10)
            if op == 0:
                parts = lines[0].split(b" ")
                parts[0] = rng.choice(METHODS)
                lines[0] = b" ".join(parts)
            elif op == 1:
                parts = lines[0].split(b" ")
                if len(parts) > 1:
                    parts[1] = rng.choice(PATHS)
                lines[0] = b" ".join(parts)
            elif op == 2:
                lines[0] = lines[0].rsplit(b" ", 1)[0] + b" " + rng.choice(
                    [b"HTTP/1.0", b"HTTP/2.0", b"HTTP/9.9", b"HTTP/1.1x", b"", b"FTP/1.1"])
            elif op == 3:
                lines.insert(rng.randint(1, len(lines)), rng.choice(HEADER_LINES))
            elif op == 4 and len(lines) > 1:
                del lines[rng.randrange(1, len(lines))]
            elif op == 5:
                lines.extend(b"X-Dup: %d" % i for i in range(rng.choice([5, 60, 120])))
            elif op == 6 and len(lines) > 1:
                i = rng.randrange(1, len(lines))
                lines[i] = lines[i].replace(b": ", rng.choice([b":", b" : ", b":\t", b"::"]), 1)
            elif op == 7:
                rest = rest[:rng.randint(0, len(rest))]  # a body shorter than announced
            elif op == 8:
                rest = rest + rng.choice([b"GET /health HTTP/1.1\r\n\r\n", b"\r\n", b"x" * 100])
            else:
                chunk = rng.choice([b"5\r\nhello\r\n0\r\n\r\n", b"zz\r\nhi\r\n0\r\n\r\n",
                                    b"-1\r\n\r\n", b"ffffffffffffffff\r\nx\r\n",
                                    b"5;ext=1\r\nhello\r\n0\r\n\r\n", b"5\r\nhello"])
                lines = [l for l in lines if not l.lower().startswith(b"content-length")]
                lines.append(b"Transfer-Encoding: chunked")
                rest = chunk
        data = b"\r\n".join(lines) + b"\r\n\r\n" + rest
        if rng.random() < 0.3:
            raw = bytearray(data)
            for _ in range(rng.randint(1, 6)):
                op = rng.randrange(4)
                i = rng.randrange(len(raw)) if raw else 0
                if op == 0 and raw:
                    raw[i] = rng.randrange(256)
                elif op == 1:
                    raw[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
                elif op == 2 and raw:
                    del raw[i:i + rng.randint(1, 16)]
                else:
                    raw = raw[:i]
            data = bytes(raw)
        if rng.random() < 0.05:  # bare LF line endings
            data = data.replace(b"\r\n", b"\n")
        return data, True


def _response_end(buf, allow_truncated, head_request=False):
    """(status, bytes consumed) of the first response in buf, or (None, 0) when buf does not
    yet hold a whole one; raises AssertionError when it cannot be a well-formed response."""
    m = re.match(rb"HTTP/1\.1 (\d{3}) [^\r\n]*\r\n", buf)
    if not m:
        assert len(buf) < 12 and b"HTTP/1.1 "[:len(buf)] == buf[:9], \
            f"not a status line: {buf[:120]!r}"
        return None, 0
    head, sep, body = buf.partition(b"\r\n\r\n")
    if not sep:
        return None, 0
    status = int(m.group(1))
    lines = head.split(b"\r\n")[1:]
    for l in lines:
        assert b":" in l, f"bad header line {l[:80]!r}"
    hdrs = {l.split(b":", 1)[0].strip().lower(): l.split(b":", 1)[1].strip() for l in lines}
    start = len(head) + 4
    if 100 <= status < 200 or head_request or status in (204, 304):
        return status, start
    if b"content-length" in hdrs:
        assert hdrs[b"content-length"].isdigit(), f"bad Content-Length {hdrs[b'content-length']!r}"
        n = int(hdrs[b"content-length"])
        if len(body) < n:
            return None, 0
        return status, start + n
    if hdrs.get(b"transfer-encoding", b"").lower() == b"chunked":
        i = 0
        while True:
            j = body.find(b"\r\n", i)
            if j < 0:
                return None, 0
            try:
                n = int(body[i:j].split(b";")[0], 16)
            except ValueError:
                raise AssertionError(f"bad chunk size line {body[i:j][:40]!r}")
            if n == 0:
                if body[j + 2:j + 4] == b"\r\n":
                    return status, start + j + 4
                return None, 0
            i = j + 2 + n + 2
            if i > len(body):
                return None, 0
    return status, len(buf)  # close-delimited


def parse_responses(out, cut_short=False, head_request=False):
    """Checks that bytes from the server are a sequence of well-formed HTTP/1.1 responses (1xx
    interim responses, Content-Length, chunked or close-delimited bodies). With cut_short the last
    one may be incomplete: the connection was reset, or the client stopped reading at its first
    whole answer while the server was already answering the bytes after the request (a refused
    request line leaves the rest to be read as further requests). The answer to a HEAD request
    has no body. Returns the list of final statuses, or raises AssertionError."""
    statuses = []
    rest = out
    while rest:
        st, used = _response_end(rest, cut_short, head_request and not statuses)
        if st is None:
            assert cut_short, f"incomplete response before the close: {rest[:200]!r}"
            m = re.match(rb"HTTP/1\.1 (\d{3}) ", rest)
            if m:
                statuses.append(int(m.group(1)))
            break
        if not 100 <= st < 200:
            statuses.append(st)
        rest = rest[used:]
    return statuses


def fuzz_exchange(port, data, idle=0.3, timeout=15.0):
    """Sends one (possibly broken) request and reads what comes back: until a whole final
    response, EOF or a reset. When the server says nothing for `idle` seconds (it may be waiting
    for a body that will never come) the client half-closes, so the server sees EOF at once.
    Returns (bytes, how: 'answer', 'eof', 'reset' or 'stall')."""
    out = b""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            return out, "reset"
        half = False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s.settimeout(idle if not half else max(0.01, deadline - time.monotonic()))
            try:
                b = s.recv(65536)
            except socket.timeout:
                if half:
                    break
                s.shutdown(socket.SHUT_WR)
                half = True
                continue
            except ConnectionResetError:
                return out, "reset"
            if not b:
                return out, "eof"
            out += b
            rest = out
            try:
                while rest:
                    st, used = _response_end(rest, False, data.startswith(b"HEAD "))
                    if st is None:
                        break
                    if not 100 <= st < 200:
                        return out, "answer"
                    rest = rest[used:]
            except AssertionError:
                return out, "answer"  # malformed: parse_responses reports it
        return out, "stall"
    finally:
        s.close()
