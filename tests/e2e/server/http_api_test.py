#!/usr/bin/env python3
"""`mla serve` over raw HTTP (Python standard library only): the SSE framing byte for byte, the
status and OpenAI error envelope of each bad request class (docs/RELIABILITY.md §Checklist R35-R46), /health,
/metrics, /tokenize, /detokenize, 429 with Retry-After when the queue is full, and SIGTERM: drain
in-flight streams and exit 0, or with no drain time end them with an error event and [DONE].
After every bad request the server still serves.

Usage: http_api_test.py MLA_BINARY MODEL_DIR
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from mla_server import MlaServer, find_binary_and_model, sse_events

BINARY, MODEL = find_binary_and_model(sys.argv)
SERVER = None


def setUpModule():
    global SERVER
    SERVER = MlaServer(BINARY, MODEL, "--max-body-bytes", "65536", "--max-model-len", "256")


def tearDownModule():
    if SERVER:
        assert SERVER.stop() == 0


def raw_exchange(port, data, timeout=10):
    """Sends raw bytes, returns everything the server answers until it closes or times out."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        out = b""
        while True:
            try:
                b = s.recv(65536)
            except socket.timeout:
                break
            if not b:
                break
            out += b
            if b"\r\n\r\n" in out and b"Connection: close" not in out:
                head, _, body = out.partition(b"\r\n\r\n")
                n = [l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                if n and len(body) >= int(n[0].split(b":")[1]):
                    break
        return out
    finally:
        s.close()


def read_until_closed(port, data, timeout):
    """Sends raw bytes, returns everything the server answers; fails unless it closes the
    connection within `timeout` seconds."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        out = b""
        while True:
            b = s.recv(65536)  # socket.timeout fails the test: the server left it hanging
            if not b:
                return out
            out += b
    finally:
        s.close()


def split_responses(raw):
    """[(status, body)] of consecutive responses framed by Content-Length."""
    out = []
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        n = [int(l.split(b":")[1]) for l in lines[1:] if l.lower().startswith(b"content-length:")]
        out.append((int(lines[0].split()[1]), rest[:n[0]]))
        raw = rest[n[0]:]
    return out


class StreamFramingTest(unittest.TestCase):
    def test_sse_framing_and_chunks(self):
        body = {"model": SERVER.model_id, "prompt": "Hello", "max_tokens": 6, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
        status, headers, raw = SERVER.request("POST", "/v1/completions", body)
        self.assertEqual(status, 200)
        self.assertTrue(headers["content-type"].startswith("text/event-stream"))
        events = sse_events(raw)
        self.assertEqual(events[-1], "[DONE]")
        chunks = [json.loads(e) for e in events[:-1]]
        self.assertEqual(chunks[-1]["choices"], [])
        self.assertEqual(chunks[-1]["usage"]["completion_tokens"], 6)
        finals = [c for c in chunks[:-1] if c["choices"][0]["finish_reason"] is not None]
        self.assertEqual(len(finals), 1)
        self.assertIs(finals[0], chunks[-2])
        for c in chunks[:-1]:
            self.assertIn("usage", c)
            self.assertIsNone(c["usage"])
            self.assertEqual(c["object"], "text_completion")

    def test_chat_stream_gzip_accepted_stays_plain(self):
        # Clients send Accept-Encoding: gzip; an event stream must stay unbuffered plain text.
        body = {"model": SERVER.model_id, "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 3, "stream": True, "temperature": 0}
        status, headers, raw = SERVER.request("POST", "/v1/chat/completions", body,
                                              {"Accept-Encoding": "gzip, deflate, br"})
        self.assertEqual(status, 200)
        self.assertNotIn("content-encoding", headers)
        events = sse_events(raw)
        first = json.loads(events[0])["choices"][0]
        self.assertEqual(first["delta"], {"role": "assistant"})
        self.assertIsNone(first["finish_reason"])


class BadRequestTest(unittest.TestCase):
    def assert_error(self, status, method, path, body=None, headers=None, param=None):
        got, hdrs, raw = SERVER.request(method, path, body, headers)
        self.assertEqual(got, status, raw[:300])
        err = json.loads(raw)["error"]
        self.assertEqual(set(err), {"message", "type", "param", "code"})
        self.assertTrue(err["message"])
        if param is not None:
            self.assertEqual(err["param"], param, err)
        return err, hdrs

    def tearDown(self):
        # Whatever was sent, the next ordinary request is served.
        status, _, raw = SERVER.post_json("/v1/completions", {"model": SERVER.model_id,
                                                              "prompt": "ok", "max_tokens": 2})
        self.assertEqual(status, 200, raw)

    def chat(self, **fields):
        body = {"model": SERVER.model_id, "messages": [{"role": "user", "content": "hi"}]}
        body.update(fields)
        return body

    def test_routes_and_methods(self):
        self.assert_error(404, "GET", "/v2/nothing")
        _, hdrs = self.assert_error(405, "GET", "/v1/completions")
        self.assertEqual(hdrs.get("allow"), "POST")
        self.assert_error(405, "DELETE", "/v1/models")

    def test_malformed_json(self):
        for text in ['{"model": ', '{"a": 1} trailing', '[1, 2]', '{"a": 1, "a": 2}',
                     "[" * 100 + "]" * 100, '{"x":' * 70 + "1" + "}" * 70]:
            with self.subTest(text=text[:20]):
                self.assert_error(400, "POST", "/v1/completions", text,
                                  {"Content-Type": "application/json"})

    def test_wrong_types_name_the_param(self):
        for field, value in [("max_tokens", "abc"), ("temperature", "hot"), ("messages", "hi"),
                             ("stream", "yes"), ("top_k", 1.5), ("seed", "x"), ("stop", 5),
                             ("logprobs", 3)]:
            with self.subTest(field=field):
                self.assert_error(400, "POST", "/v1/chat/completions",
                                  self.chat(**{field: value}), param=field)

    def test_out_of_range(self):
        for field, value in [("max_tokens", -5), ("n", 17), ("temperature", 2.5), ("top_p", 1.5),
                             ("top_k", -2), ("top_logprobs", 21), ("presence_penalty", 3),
                             ("frequency_penalty", -2.5), ("min_p", 2), ("n_discard", -1),
                             ("stop", ["x" * 300])]:
            with self.subTest(field=field):
                self.assert_error(400, "POST", "/v1/chat/completions",
                                  self.chat(**{field: value}), param=field)
        self.assert_error(400, "POST", "/v1/chat/completions",
                          self.chat(logprobs=True, top_logprobs=21), param="top_logprobs")
        self.assert_error(400, "POST", "/v1/chat/completions",
                          self.chat(logit_bias={"abc": 1}), param="logit_bias")
        self.assert_error(400, "POST", "/v1/chat/completions",
                          self.chat(logit_bias={"5": 101}), param="logit_bias")
        self.assert_error(400, "POST", "/v1/chat/completions",
                          self.chat(chat_template_kwargs={"thinking": True}))

    def test_messages(self):
        for messages, param in [([], "messages"), ([{"role": "wizard", "content": "x"}],
                                                   "messages[0].role"),
                                ([{"role": "user"}], "messages[0].content"),
                                ([{"role": "user", "content": [
                                    {"type": "image_url", "image_url": {"url": "x"}}]}],
                                 "messages[0].content[0].type"),
                                ([5], "messages[0]")]:
            with self.subTest(param=param):
                self.assert_error(400, "POST", "/v1/chat/completions",
                                  self.chat(messages=messages), param=param)

    def test_prompt_token_ids(self):
        for prompt in [[-1], [10**9], [1, "a"], [[1], "a"], [], [1.5]]:
            with self.subTest(prompt=prompt):
                self.assert_error(400, "POST", "/v1/completions",
                                  {"model": SERVER.model_id, "prompt": prompt}, param="prompt")

    def test_context_length(self):
        _, _, models = SERVER.request("GET", "/v1/models")
        n = json.loads(models)["data"][0]["max_model_len"] + 10
        err, _ = self.assert_error(400, "POST", "/v1/completions",
                                   {"model": SERVER.model_id, "prompt": [5] * n}, param="prompt")
        self.assertRegex(err["message"], rf"maximum context length is \d+ tokens.* {n} tokens")
        # A text far past the context is refused before it is encoded: it is at least
        # bytes / (longest token) tokens.
        err, _ = self.assert_error(400, "POST", "/v1/completions",
                                   {"model": SERVER.model_id, "prompt": "lorem ipsum " * 5000},
                                   param="prompt")
        self.assertEqual(err["code"], "context_length_exceeded")
        self.assertRegex(err["message"], r"maximum context length is 256 tokens.* at least \d+ "
                                         r"tokens \(60000 bytes")
        err, _ = self.assert_error(400, "POST", "/v1/chat/completions", self.chat(
            messages=[{"role": "user", "content": "lorem ipsum " * 5000}]), param="messages")
        self.assertEqual(err["code"], "context_length_exceeded")

    def test_unknown_fields_are_ignored(self):
        status, _, r = SERVER.post_json("/v1/chat/completions", self.chat(
            max_tokens=2, user="u", metadata={"a": "b"}, store=False, service_tier="auto",
            parallel_tool_calls=False, some_future_field={"x": [1, 2]}, repetition_penalty=1.0,
            best_of=1, stream_options=None))
        self.assertEqual(status, 200, r)

    def test_unknown_model_404(self):
        err, _ = self.assert_error(404, "POST", "/v1/chat/completions", self.chat(model="nope"),
                                   param="model")
        self.assertEqual(err["code"], "model_not_found")

    def test_body_limits_and_encodings(self):
        # Content-Length over the cap: 413 before the body is sent at all.
        out = raw_exchange(SERVER.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Type: application/json\r\nContent-Length: 104857600\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 413"), out[:100])
        self.assertIn(b'"error"', out)
        self.assert_error(415, "POST", "/v1/completions", b"\x1f\x8b\x08\x00",
                          {"Content-Encoding": "gzip", "Content-Type": "application/json"})
        out = raw_exchange(SERVER.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 400"), out[:100])
        # A chunked body cannot be capped before it is read: 411, answered before any of it is
        # read (this one never ends); so is a Content-Length that is not a plain number.
        out = raw_exchange(SERVER.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                           b"Transfer-Encoding: chunked\r\n\r\n100000\r\n" + b"a" * 4096,
                           timeout=3)
        self.assertTrue(out.startswith(b"HTTP/1.1 411"), out[:100])
        out = raw_exchange(SERVER.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Length: 1 2\r\n\r\n{}", timeout=3)
        self.assertTrue(out.startswith(b"HTTP/1.1 400"), out[:100])
        self.assertEqual(SERVER.request("GET", "/health")[0], 200)

    def test_header_limits(self):
        # docs/RELIABILITY.md §Checklist R36: > 100 headers or a header block > 16 KiB: 431; a request
        # line > 8 KiB: 414. The server keeps serving.
        many = b"".join(b"X-H%d: y\r\n" % i for i in range(101))
        out = raw_exchange(SERVER.port, b"GET /health HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 431"), out[:100])
        big = b"".join(b"X-H%d: %s\r\n" % (i, b"b" * 1000) for i in range(20))
        out = raw_exchange(SERVER.port, b"GET /health HTTP/1.1\r\nHost: x\r\n" + big + b"\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 431"), out[:100])
        self.assertIn(b'"error"', out)
        out = raw_exchange(SERVER.port, b"GET /health?" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 414"), out[:100])
        fine = b"".join(b"X-H%d: y\r\n" % i for i in range(90))
        out = raw_exchange(SERVER.port, b"GET /health HTTP/1.1\r\nHost: x\r\n" + fine +
                           b"Connection: close\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 200"), out[:100])
        # One header line over 8 KiB (under the 16 KiB block limit): 431, and the connection ends
        # (the request after it is not answered).
        out = read_until_closed(SERVER.port, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " +
                                b"b" * 9000 + b"\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n",
                                timeout=3)
        self.assertTrue(out.startswith(b"HTTP/1.1 431"), out[:100])
        self.assertIn(b"request_header_fields_too_large", out)
        self.assertEqual(out.count(b"HTTP/1.1 "), 1, out[:300])

    def test_pipelined_requests_are_answered_in_order(self):
        # Two completions and a /health in one write, then a request that closes: four answers in
        # order, well inside the 5 s keep-alive timeout the server waited out before.
        def completion(prompt):
            body = json.dumps({"model": SERVER.model_id, "prompt": prompt, "max_tokens": 3,
                               "temperature": 0}).encode()
            return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                    b"\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
        start = time.monotonic()
        out = read_until_closed(SERVER.port, completion("one") + b"GET /health HTTP/1.1\r\n"
                                b"Host: x\r\n\r\n" + completion("two") + b"GET /v1/models HTTP/1.1"
                                b"\r\nHost: x\r\nConnection: close\r\n\r\n", timeout=4)
        self.assertLess(time.monotonic() - start, 4)
        answers = split_responses(out)
        self.assertEqual([status for status, _ in answers], [200] * 4, out[:400])
        bodies = [json.loads(body) for _, body in answers]
        self.assertEqual([b.get("object") for b in bodies],
                         ["text_completion", None, "text_completion", "list"])
        self.assertEqual(bodies[1]["status"], "ok")
        # Each completion is the one its prompt gets alone.
        for i, prompt in ((0, "one"), (2, "two")):
            alone = json.loads(raw_exchange(SERVER.port, completion(prompt)).partition(
                b"\r\n\r\n")[2])
            self.assertEqual(bodies[i]["choices"][0]["text"], alone["choices"][0]["text"])

    def test_a_framing_error_closes_the_connection(self):
        # A Content-Length that is not a number: 400, and the bytes after it are not taken for a
        # request (nor answered); the server closes the connection.
        out = read_until_closed(SERVER.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                b"Content-Length: 1 2\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n",
                                timeout=4)
        self.assertTrue(out.startswith(b"HTTP/1.1 400"), out[:100])
        self.assertEqual(out.count(b"HTTP/1.1 "), 1, out[:300])
        self.assertIn(b"Connection: close", out.partition(b"\r\n\r\n")[0])


class InfoRoutesTest(unittest.TestCase):
    def test_health_models_metrics(self):
        status, _, raw = SERVER.request("GET", "/health")
        self.assertEqual((status, json.loads(raw)["status"]), (200, "ok"))
        status, _, models = SERVER.post_json("/tokenize", {"prompt": "héllo wörld"})
        self.assertEqual(status, 200)
        status, _, text = SERVER.post_json("/detokenize", {"tokens": models["tokens"]})
        self.assertTrue(text["prompt"].endswith("héllo wörld"))
        status, headers, raw = SERVER.request("GET", "/metrics")
        self.assertEqual(status, 200)
        self.assertTrue(headers["content-type"].startswith("text/plain"))
        m = SERVER.metrics()
        for name in ("vllm:num_requests_running", "vllm:kv_cache_blocks_used",
                     "vllm:kv_cache_blocks_free", "vllm:generation_tokens_total"):
            self.assertIn(name, m)

    def test_model_by_id(self):
        status, _, raw = SERVER.request("GET", "/v1/models/" + SERVER.model_id)
        self.assertEqual(status, 200, raw)
        self.assertEqual(json.loads(raw)["id"], SERVER.model_id)
        self.assertEqual(json.loads(raw)["object"], "model")
        status, _, raw = SERVER.request("GET", "/v1/models/deepseek-ai/DeepSeek-V3")
        self.assertEqual(status, 404)
        self.assertEqual(json.loads(raw)["error"]["code"], "model_not_found")
        self.assertIn("deepseek-ai/DeepSeek-V3", json.loads(raw)["error"]["message"])

    def test_metrics_are_open_unless_asked_to_need_the_key(self):
        s = MlaServer(BINARY, MODEL, "--api-key", "k3y")
        try:
            self.assertEqual(s.request("GET", "/metrics")[0], 200)
            self.assertEqual(s.request("GET", "/v1/models")[0], 401)  # the API itself still asks
        finally:
            self.assertEqual(s.stop(), 0)
        s = MlaServer(BINARY, MODEL, "--api-key", "k3y", "--metrics-require-key")
        try:
            self.assertEqual(s.request("GET", "/metrics")[0], 401)
            self.assertEqual(s.request("GET", "/metrics", headers={"Authorization": "Bearer k3y"})[0],
                             200)
        finally:
            self.assertEqual(s.stop(), 0)

    def test_cors(self):
        page, other = "http://page.example:3000", "http://other.example"
        preflight = {"Access-Control-Request-Method": "POST",
                     "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os"}
        # Without --allowed-origins: no CORS headers, a preflight from a page is refused.
        status, headers, _ = SERVER.request("GET", "/v1/models", headers={"Origin": page})
        self.assertEqual(status, 200)
        self.assertNotIn("access-control-allow-origin", headers)
        status, headers, raw = SERVER.request("OPTIONS", "/v1/chat/completions",
                                              headers={"Origin": page, **preflight})
        self.assertEqual(status, 403)
        self.assertIn(page, json.loads(raw)["error"]["message"])
        s = MlaServer(BINARY, MODEL, "--allowed-origins", page, "--api-key", "k3y")
        try:
            # The preflight is answered without the key (browsers send none).
            status, headers, _ = s.request("OPTIONS", "/v1/chat/completions",
                                           headers={"Origin": page, **preflight})
            self.assertEqual(status, 204)
            self.assertEqual(headers["access-control-allow-origin"], page)
            self.assertIn("POST", headers["access-control-allow-methods"])
            # The headers the page asked for (browser SDKs add their own), and Retry-After
            # readable by the page; the answer varies with Origin.
            self.assertEqual(headers["access-control-allow-headers"],
                             "authorization, content-type, x-stainless-os")
            self.assertIn("Retry-After", headers["access-control-expose-headers"])
            self.assertEqual(headers["vary"], "Origin")
            # The request itself, and its errors, carry the header for that origin only.
            auth = {"Authorization": "Bearer k3y", "Origin": page}
            status, headers, _ = s.request("POST", "/v1/completions",
                                           {"model": s.model_id, "prompt": "Hi", "max_tokens": 2},
                                           headers=auth)
            self.assertEqual(status, 200)
            self.assertEqual(headers["access-control-allow-origin"], page)
            status, headers, _ = s.request("GET", "/v1/models", headers={"Origin": page})
            self.assertEqual(status, 401)
            self.assertEqual(headers["access-control-allow-origin"], page)
            status, headers, _ = s.request("OPTIONS", "/v1/completions",
                                           headers={"Origin": other, **preflight})
            self.assertEqual(status, 403)
            self.assertNotIn("access-control-allow-origin", headers)
        finally:
            self.assertEqual(s.stop(), 0)

    def test_chat_page(self):
        status, headers, raw = SERVER.request("GET", "/")
        self.assertEqual(status, 200)
        self.assertTrue(headers["content-type"].startswith("text/html"))
        self.assertIn(b"<html", raw.lower())


def wait_in_flight(server, n, timeout=30):
    """Waits (bounded) until n completion requests are admitted."""
    deadline = time.time() + timeout
    while server.metrics().get("vllm:http_requests_in_flight", 0) < n:
        assert time.time() < deadline, f"{n} requests were never in flight"
        time.sleep(0.01)


def stream_in_thread(server, max_tokens, out, prompt="Go"):
    body = {"model": server.model_id, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
            "ignore_eos": True, "temperature": 0}
    out.append(server.request("POST", "/v1/completions", body, timeout=120))


class SlowClientTest(unittest.TestCase):
    def test_slow_headers_are_cut_at_the_header_timeout(self):
        # Slowloris: each connection sends one header byte per second, so no single read ever
        # times out; the server closes them once 10 s pass without complete headers, and a normal
        # client is served meanwhile.
        socks = []
        for _ in range(20):
            c = socket.create_connection(("127.0.0.1", SERVER.port), timeout=5)
            c.sendall(b"GET /health HTTP/1.1\r\n")
            socks.append(c)
        start = time.time()
        closed = {}
        while len(closed) < len(socks) and time.time() - start < 20:
            for i, c in enumerate(socks):
                if i in closed:
                    continue
                try:
                    c.sendall(b"X")
                except OSError:
                    closed[i] = time.time() - start
            t = time.time()
            self.assertEqual(SERVER.request("GET", "/health", timeout=5)[0], 200)
            self.assertLess(time.time() - t, 1.0)
            time.sleep(1)
        for c in socks:
            c.close()
        self.assertEqual(len(closed), len(socks), "slow connections left open after 20 s")
        # Cut between 10 s (the header timeout) and 10 s + the watchdog's look (0.5 s) + the
        # 1 s between our writes + the second write that notices the reset.
        self.assertGreaterEqual(min(closed.values()), 9.5)
        self.assertLess(max(closed.values()), 14.0)
        self.assertGreaterEqual(SERVER.metrics()["vllm:http_connections_timed_out"], len(socks))


    def test_a_slow_body_is_cut_at_the_read_timeout(self):
        # --read-timeout 2: the headers come at once, then the body one byte every 0.25 s (no
        # single read times out); the connection is closed about 2 s after the headers.
        s = MlaServer(BINARY, MODEL, "--read-timeout", "2")
        try:
            c = socket.create_connection(("127.0.0.1", s.port), timeout=5)
            c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 1000\r\n\r\n")
            start, closed = time.time(), None
            while closed is None and time.time() - start < 15:
                try:
                    c.sendall(b" ")
                except OSError:
                    closed = time.time() - start
                time.sleep(0.25)
            c.close()
            self.assertIsNotNone(closed, "a body trickling for 15 s was never cut")
            # 2 s, plus the watchdog's look (0.25 s) and a write or two to notice the reset.
            self.assertGreaterEqual(closed, 1.9)
            self.assertLess(closed, 3.5)
        finally:
            self.assertEqual(s.stop(), 0)


class WarmPrefixTest(unittest.TestCase):
    def test_warm_prefixes_are_pinned_and_hit(self):
        shared = "You are a careful assistant who answers in one short sentence. " * 4
        ids = list(range(10, 80))
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            f.write(json.dumps(shared) + "\n\n" + json.dumps(ids) + "\n")
        s = MlaServer(BINARY, MODEL, "--warm-prefix", f.name, "--page-size", "16")
        try:
            self.assertTrue(any("pinned 2 warm prefixes" in l for l in s.log), s.log)
            m = s.metrics()  # pinned before the server reports ready
            self.assertEqual(m["vllm:num_pinned_prefixes"], 2)
            self.assertGreater(m["vllm:kv_cache_blocks_used"], 0)  # pinned pages stay referenced
            status, _, _ = s.post_json("/v1/completions", {
                "model": s.model_id, "prompt": shared + "Why?", "max_tokens": 2})
            self.assertEqual(status, 200)
            status, _, _ = s.post_json("/v1/completions", {
                "model": s.model_id, "prompt": ids + [90, 91], "max_tokens": 2})
            self.assertEqual(status, 200)
            self.assertGreaterEqual(s.metrics()["vllm:prefix_cache_hits_total"], 2)
        finally:
            self.assertEqual(s.stop(), 0)
            os.unlink(f.name)

    def test_a_bad_warm_prefix_file_stops_the_start(self):
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            f.write(json.dumps("fine " * 40) + '\n{"not": "a prompt"}\n')
        try:
            p = subprocess.run([BINARY, "serve", "-m", MODEL, "--port", "0", "--warm-prefix",
                                f.name], capture_output=True, text=True, timeout=60)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn(f.name + ":2", p.stderr)
        finally:
            os.unlink(f.name)


class QueueAndShutdownTest(unittest.TestCase):
    def test_queue_full_429(self):
        s = MlaServer(BINARY, MODEL, "--max-num-seqs", "1", "--max-queue", "0")
        try:
            out = []
            t = threading.Thread(target=stream_in_thread, args=(s, 3000, out))
            t.start()
            wait_in_flight(s, 1)
            start = time.time()
            status, headers, raw = s.request("POST", "/v1/completions",
                                             {"model": s.model_id, "prompt": "x"})
            self.assertLess(time.time() - start, 0.5)
            self.assertEqual(status, 429)
            self.assertEqual(headers.get("retry-after"), "1")
            self.assertEqual(json.loads(raw)["error"]["type"], "rate_limit_error")
            t.join()
            self.assertEqual(out[0][0], 200)
        finally:
            self.assertEqual(s.stop(), 0)

    def test_queue_limit_counts_every_prompt_of_a_request(self):
        # Two slots, no queue: one request with two prompts holds both, so a third prompt in a
        # second request is over the limit (the limit counts engine sequences, not requests).
        s = MlaServer(BINARY, MODEL, "--max-num-seqs", "2", "--max-queue", "0")
        try:
            out = []
            t = threading.Thread(target=stream_in_thread, args=(s, 3000, out, ["Go", "On"]))
            t.start()
            wait_in_flight(s, 1)
            status, _, raw = s.request("POST", "/v1/completions", {"model": s.model_id, "prompt": "x"})
            self.assertEqual(status, 429, raw)
            self.assertIn("this request has 1", json.loads(raw)["error"]["message"])
            t.join()
            self.assertEqual(out[0][0], 200)
            # Freed when answered (the client can read the last byte just before the server
            # lets go of the slots): the same request is admitted now.
            s.wait_idle()
            status, _, raw = s.request("POST", "/v1/completions",
                                       {"model": s.model_id, "prompt": ["x", "y"], "max_tokens": 2})
            self.assertEqual(status, 200, raw)
        finally:
            self.assertEqual(s.stop(), 0)

    def test_n_beyond_what_the_server_holds_is_a_400(self):
        s = MlaServer(BINARY, MODEL, "--max-num-seqs", "2", "--max-queue", "1")
        try:
            status, _, raw = s.request("POST", "/v1/completions",
                                       {"model": s.model_id, "prompt": "x", "n": 4})
            self.assertEqual(status, 400, raw)  # never 429: a retry could never fit
            self.assertEqual(json.loads(raw)["error"]["param"], "n")
            status, _, raw = s.request("POST", "/v1/completions",
                                       {"model": s.model_id, "prompt": "x", "n": 2, "max_tokens": 3})
            self.assertEqual(status, 200, raw)
            self.assertEqual(len(json.loads(raw)["choices"]), 2)
        finally:
            self.assertEqual(s.stop(), 0)

    def test_sigterm_drains_streams(self):
        s = MlaServer(BINARY, MODEL, "--shutdown-timeout", "60")
        out = []
        threads = [threading.Thread(target=stream_in_thread, args=(s, 200, out)) for _ in range(3)]
        for t in threads:
            t.start()
        wait_in_flight(s, 3)
        self.assertEqual(s.stop(), 0)
        for t in threads:
            t.join()
        for status, _, raw in out:
            self.assertEqual(status, 200)
            events = sse_events(raw)
            self.assertEqual(events[-1], "[DONE]")
            self.assertEqual(json.loads(events[-2])["choices"][0]["finish_reason"], "length")

    def test_sigterm_without_drain_ends_streams_with_an_error_event(self):
        s = MlaServer(BINARY, MODEL, "--shutdown-timeout", "0")
        out = []
        t = threading.Thread(target=stream_in_thread, args=(s, 30000, out))
        t.start()
        wait_in_flight(s, 1)
        time.sleep(0.2)
        self.assertEqual(s.stop(), 0)
        t.join()
        status, _, raw = out[0]
        self.assertEqual(status, 200)
        events = sse_events(raw)
        self.assertEqual(events[-1], "[DONE]")
        self.assertIn("error", json.loads(events[-2]))


class TiktokenModelTest(unittest.TestCase):
    """make-tiny's Kimi-K2 and Moonlight models ship a tiktoken ranks file (tiktoken.model and
    tokenizer_config.json, no tokenizer.json), as the real checkpoints do: text requests are
    served end to end, the chat prompt in Kimi's format (docs/TOKENIZER.md)."""

    def test_kimi_families_answer_text(self):
        for family in ("kimi-k2", "moonlight"):
            with self.subTest(family=family), tempfile.TemporaryDirectory() as d:
                subprocess.run([BINARY, "make-tiny", "--family", family, "--out", d], check=True,
                               capture_output=True)
                self.assertTrue(os.path.exists(os.path.join(d, "tiktoken.model")))
                self.assertFalse(os.path.exists(os.path.join(d, "tokenizer.json")))
                s = MlaServer(BINARY, d)
                try:
                    status, _, raw = s.request("GET", "/v1/models")
                    self.assertEqual(status, 200)
                    model = json.loads(raw)["data"][0]["id"]
                    messages = [{"role": "user", "content": "Hello there, how are you?"}]
                    status, _, chat = s.post_json("/tokenize", {"model": model, "messages": messages})
                    self.assertEqual(status, 200, chat)
                    status, _, text = s.post_json("/tokenize", {"model": model,
                                                                "prompt": "Hello there, how are you?"})
                    self.assertEqual(status, 200, text)
                    # The message's ids sit inside the chat prompt, between the format's markers
                    # (a text prompt starts with [BOS], id 0 in make-tiny's Kimi layout).
                    ids, inner = chat["tokens"], text["tokens"]
                    self.assertEqual(inner[0], 0)
                    inner = inner[1:]
                    self.assertGreater(len(ids), len(inner))
                    self.assertTrue(any(ids[i:i + len(inner)] == inner for i in range(len(ids))),
                                    (ids, inner))
                    status, _, body = s.post_json("/v1/chat/completions", {
                        "model": model, "messages": messages, "max_tokens": 4, "temperature": 0})
                    self.assertEqual(status, 200, body)
                    self.assertEqual(body["usage"]["prompt_tokens"], len(ids))
                    self.assertIsInstance(body["choices"][0]["message"]["content"], str)
                finally:
                    self.assertEqual(s.stop(), 0)

    def test_kimi_thinking_format(self):
        """A Kimi-K2-Thinking template (recognised by its <think></think>) turns the reasoning
        parser on: replies carry reasoning_content (the tiny model never closes its thought, so
        all of it); reasoning_content sent back shows in the prompt only after the last plain
        reply; a reasoning_content that is not a string is a 400 naming it."""
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([BINARY, "make-tiny", "--family", "kimi-k2", "--out", d], check=True,
                           capture_output=True)
            cfg_path = os.path.join(d, "tokenizer_config.json")
            with open(cfg_path, encoding="utf-8") as f:
                cfg = json.load(f)
            cfg["chat_template"] = ("{{ '<|im_assistant|>assistant<|im_middle|>' }}"
                                    "<think></think>{{ message['content'] }}")
            with open(cfg_path, "w", encoding="utf-8") as f:
                json.dump(cfg, f)
            s = MlaServer(BINARY, d)
            try:
                model = json.loads(s.request("GET", "/v1/models")[2])["data"][0]["id"]

                def tokens(reasoning):
                    messages = [{"role": "user", "content": "Hi"},
                                {"role": "assistant", "content": "Hello", "reasoning_content": reasoning},
                                {"role": "user", "content": "Time?"},
                                {"role": "assistant", "content": None, "reasoning_content": reasoning,
                                 "tool_calls": [{"id": "functions.now:0", "type": "function",
                                                 "function": {"name": "now", "arguments": "{}"}}]}]
                    status, _, body = s.post_json("/tokenize", {"model": model, "messages": messages,
                                                                "add_generation_prompt": False})
                    self.assertEqual(status, 200, body)
                    return body["tokens"]

                short, long_ = tokens("a"), tokens("a long chain of thought")
                self.assertGreater(len(long_), len(short))  # the open turn shows its reasoning
                status, _, body = s.post_json("/v1/chat/completions", {
                    "model": model, "messages": [{"role": "user", "content": "Hi"}],
                    "max_tokens": 4, "temperature": 0})
                self.assertEqual(status, 200, body)
                self.assertIn("reasoning_content", body["choices"][0]["message"])
                status, _, body = s.post_json("/v1/chat/completions", {
                    "model": model, "max_tokens": 1, "messages": [
                        {"role": "user", "content": "Hi"},
                        {"role": "assistant", "content": "x", "reasoning_content": 5}]})
                self.assertEqual(status, 400, body)
                self.assertIn("reasoning_content", body["error"]["message"])
            finally:
                self.assertEqual(s.stop(), 0)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], *sys.argv[3:]], verbosity=2)  # extra args: test names
