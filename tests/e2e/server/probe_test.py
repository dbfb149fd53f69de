#!/usr/bin/env python3
"""The real `mla probe` binary against the real `mla serve` on loopback, once per diagnosis: a
working endpoint (reply, latency, exit 0; with and without /v1; --json), a wrong key (401 names
the variable and the key's length, never the key), an unset variable, an unknown model (the served
id listed), a doubled /v1, a wrong path, a closed port, and --compare on the same model (every
token agrees) and on another one (the first divergence reported). Two failures need something other than our server answering, so a stub plays it:
a proxy (http.server answering 502 HTML with `Server: nginx`) and a server whose 200 has no
choices. Exit codes are the documented ones (docs/SERVING.md).

Usage: probe_test.py MLA_BINARY MODEL_DIR
"""
import http.server
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import unittest

from mla_server import MlaServer, find_binary_and_model

BINARY, MODEL = find_binary_and_model(sys.argv)
KEY = "sk-probe-test-0123456789"
SERVER = None

OK, UNREACHABLE, UNAUTHORIZED, MODEL_NOT_FOUND, WRONG_PATH, DOUBLED_V1 = 0, 2, 3, 4, 5, 6
PROXY, NO_CHOICES, MISMATCH = 7, 8, 10


def setUpModule():
    global SERVER
    # The engine's default numerics, which `mla probe --compare` runs locally ("a server started
    # without flags computes what this does"; MlaServer would otherwise pick FP32).
    SERVER = MlaServer(BINARY, MODEL, "--api-key", KEY, "--matmul-dtype", "bf16",
                       "--attention-dtype", "bf16")


def tearDownModule():
    if SERVER:
        assert SERVER.stop() == 0, "mla serve did not exit 0 on SIGTERM"


def run_probe(args, base_url, model, env, timeout=30):
    full_env = {k: v for k, v in os.environ.items() if k not in ("MLA_API_KEY", "OPENAI_API_KEY")}
    full_env.update({"MLA_API_KEY": KEY} if env is None else env)
    cmd = [BINARY, "probe", "--base-url", base_url or SERVER.base_url,
           "--model", model or SERVER.model_id, "--timeout", str(timeout), *args]
    return subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=300)


def probe(*args, base_url=None, model=None, env=None, timeout=30):
    """`mla probe ARGS` → (exit code, stdout + stderr); env: the key variables to set (the usual
    ones are removed from the inherited environment first)."""
    p = run_probe(args, base_url, model, env, timeout)
    return p.returncode, p.stdout + p.stderr


def probe_json(*args, base_url=None, model=None, env=None):
    """`mla probe --json ARGS` → (exit code, the object on stdout, stdout + stderr)."""
    p = run_probe(("--json", *args), base_url, model, env)
    return p.returncode, json.loads(p.stdout), p.stdout + p.stderr


def closed_port():
    """A loopback port nothing listens on: bound once by the OS, then released."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stub:
    """A third party at the base URL: answers every request with one canned response."""

    def __init__(self, status, body, content_type, headers=()):
        class Handler(http.server.BaseHTTPRequestHandler):
            server_version, sys_version = dict(headers).get("Server", "stub"), ""

            def answer(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                for k, v in headers:
                    if k != "Server":
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = answer

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class WorkingEndpointTest(unittest.TestCase):
    def test_reply_and_latency_with_and_without_v1(self):
        for url in (SERVER.base_url, SERVER.base_url + "/", SERVER.base_url + "/v1"):
            rc, out = probe(base_url=url)
            self.assertEqual(rc, OK, out)
            self.assertIn("ok: HTTP 200 from " + SERVER.base_url + "/v1/chat/completions", out)
            self.assertRegex(out, r"in \d+\.\d ms")
            self.assertIn("reply: \"", out)
            self.assertIn(f"key: MLA_API_KEY ({len(KEY)} characters)", out)
            self.assertNotIn(KEY, out)
            # The openai SDK needs the /v1 the probe added: a warning naming the URL to give it.
            warned = f'give the openai SDK base_url="{SERVER.base_url}/v1"' in out
            self.assertEqual(warned, not url.endswith("/v1"), out)

    def test_json_and_completions(self):
        rc, j, out = probe_json("--completions", "--prompt", "The capital of France is")
        self.assertEqual(rc, OK, out)
        self.assertTrue(j["ok"])
        self.assertEqual(j["diagnosis"], "ok")
        self.assertEqual(j["status"], 200)
        self.assertGreater(j["latency_ms"], 0)
        self.assertIsInstance(j["reply"], str)
        self.assertEqual(j["url"], SERVER.base_url + "/v1/completions")
        self.assertEqual(j["key"], {"env": "MLA_API_KEY", "set": True, "length": len(KEY)})
        self.assertNotIn(KEY, out)

    def test_other_variable_and_openai_fallback(self):
        rc, out = probe("--api-key-env", "MY_PROBE_KEY", env={"MY_PROBE_KEY": KEY})
        self.assertEqual(rc, OK, out)
        rc, out = probe(env={"OPENAI_API_KEY": KEY})
        self.assertEqual(rc, OK, out)
        self.assertIn("key: OPENAI_API_KEY", out)

    def test_compare_with_the_same_model_agrees_fully(self):
        rc, j, out = probe_json("--compare", "-m", MODEL)
        self.assertEqual(rc, OK, out)
        self.assertEqual(len(j["compare"]), 3)
        for c in j["compare"]:
            self.assertTrue(c["full"], c)
            self.assertEqual(c["agreed"], 16)
            self.assertEqual(c["total"], 16)
            self.assertIsNone(c["first_divergence"])
        rc, out = probe("--compare", "-m", MODEL, "--prompt", "Once upon a time",
                        "--max-tokens", "8")
        self.assertEqual(rc, OK, out)
        self.assertIn("\"Once upon a time\": 8/8 tokens agree", out)
        self.assertIn("ok: 8/8 tokens agree over 1 prompts", out)

    def test_compare_with_another_model_reports_the_divergence(self):
        # The same shapes and tokenizer, other random weights: greedy tokens differ early.
        with tempfile.TemporaryDirectory() as tmp:
            other = os.path.join(tmp, "tiny-v3-seed2")
            subprocess.run([BINARY, "make-tiny", "--family", "v3", "--seed", "2", "--out", other],
                           check=True, capture_output=True, timeout=120)
            rc, out = probe("--compare", "-m", other)
        self.assertEqual(rc, MISMATCH, out)
        self.assertRegex(out, r"\d+/16 tokens agree \(by token (ids|texts)\); first divergence at "
                              r"token \d+: endpoint .+, local .+")
        self.assertRegex(out, r"mismatch: \d+/48 tokens agree over 3 prompts")
        # How far apart the two choices were, from both sides: other weights are not a near-tie.
        self.assertRegex(out, r"gap there: endpoint (\d+\.\d+|\?) nats, local \d+\.\d+ nats")


class KeyTest(unittest.TestCase):
    def test_wrong_key_names_variable_and_length_not_key(self):
        wrong = "sk-wrong-987654"
        rc, out = probe(env={"MLA_API_KEY": wrong})
        self.assertEqual(rc, UNAUTHORIZED, out)
        self.assertIn("unauthorized: HTTP 401", out)
        self.assertIn(f"MLA_API_KEY ({len(wrong)} characters", out)
        self.assertNotIn(wrong, out)
        self.assertNotIn(KEY, out)

    def test_unset_variable(self):
        rc, out = probe(env={})
        self.assertEqual(rc, UNAUTHORIZED, out)
        self.assertIn("MLA_API_KEY is unset", out)
        self.assertIn("no Authorization header was sent", out)
        rc, out = probe("--api-key-env", "NO_SUCH_KEY_VAR", env={"NO_SUCH_KEY_VAR": ""})
        self.assertEqual(rc, UNAUTHORIZED, out)
        self.assertIn("NO_SUCH_KEY_VAR is empty", out)

    def test_key_with_newline_is_not_sent(self):
        rc, out = probe(env={"MLA_API_KEY": KEY + "\n"})
        self.assertEqual(rc, UNAUTHORIZED, out)
        self.assertIn("line break", out)
        self.assertNotIn(KEY, out)


class SettingsTest(unittest.TestCase):
    def test_unknown_model_lists_served_ids(self):
        rc, out = probe(model="no-such-model")
        self.assertEqual(rc, MODEL_NOT_FOUND, out)
        self.assertIn("does not serve the model \"no-such-model\"", out)
        self.assertIn("served model ids", out)
        self.assertIn(SERVER.model_id, out)
        rc, j, out = probe_json(model="no-such-model")
        self.assertEqual(rc, MODEL_NOT_FOUND, out)
        self.assertEqual((j["ok"], j["diagnosis"], j["status"]), (False, "model_not_found", 404))

    def test_doubled_v1(self):
        rc, out = probe(base_url=SERVER.base_url + "/v1/v1")
        self.assertEqual(rc, DOUBLED_V1, out)
        self.assertIn("/v1/v1", out)
        self.assertIn(f"--base-url {SERVER.base_url}/v1 ", out)
        self.assertIn(f"GET {SERVER.base_url}/v1/models answers, serving: {SERVER.model_id}", out)

    def test_wrong_path_suggests_the_base_url_form(self):
        rc, out = probe(base_url=SERVER.base_url + "/api")
        self.assertEqual(rc, WRONG_PATH, out)
        self.assertIn(f"try --base-url {SERVER.base_url}/v1", out)

    def test_listener_that_never_answers(self):
        # Accepts the connection and reads the request, never answers: told apart from a
        # refused or dropped connection.
        with socket.socket() as srv:
            srv.bind(("127.0.0.1", 0))
            srv.listen(4)
            port = srv.getsockname()[1]
            rc, out = probe(base_url=f"http://127.0.0.1:{port}/v1", timeout=1)
        self.assertEqual(rc, UNREACHABLE, out)
        self.assertIn(f"127.0.0.1:{port} accepted the connection and the request but sent no "
                      "response", out)

    def test_nothing_listening(self):
        port = closed_port()
        rc, out = probe(base_url=f"http://127.0.0.1:{port}/v1")
        self.assertEqual(rc, UNREACHABLE, out)
        self.assertIn(f"nothing is listening at 127.0.0.1:{port} (connection refused)", out)


class ThirdPartyTest(unittest.TestCase):
    def test_proxy_502_html(self):
        page = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
        with Stub(502, page, "text/html", [("Server", "nginx"), ("Via", "1.1 gw")]) as stub:
            rc, out = probe(base_url=stub.base_url)
        self.assertEqual(rc, PROXY, out)
        self.assertIn("answered by Server: nginx, Via: 1.1 gw", out)
        self.assertIn("page title \"502 Bad Gateway\"", out)
        self.assertIn("text/html", out)

    def test_body_without_choices(self):
        body = json.dumps({"id": "x", "object": "chat.completion", "marker": "m" * 2000}).encode()
        with Stub(200, body, "application/json") as stub:
            rc, out = probe(base_url=stub.base_url)
        self.assertEqual(rc, NO_CHOICES, out)
        self.assertIn("no usable choices[0]", out)
        self.assertIn('raw body: {"id": "x", "object": "chat.completion", "marker": "mmm', out)
        self.assertIn("more bytes]", out)  # cut, not the whole body
        self.assertLess(len(out), 1500)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], *sys.argv[3:]], verbosity=2)  # extra args: test names
