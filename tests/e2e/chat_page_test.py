#!/usr/bin/env python3
"""The chat page `mla serve` answers at `GET /`, driven in headless Chromium over the DevTools
protocol (a minimal WebSocket client on the standard library, no packages): the API key field
(sent as a bearer token, kept in localStorage across a reload), a streamed reply equal to the
non-streamed reply to the same request at temperature 0, a second turn typed with Enter (so the
page sends the history), a server error shown in the bubble, Stop aborting a long reply, and no
JavaScript errors on the way. Exits 77 (skipped) when Chromium is not installed.

Usage: chat_page_test.py MLA_BINARY MODEL_DIR
"""
import base64
import ctypes
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

API_KEY = "chat-page-test-key"
# Stop is checked on the first of these prompts whose temperature-0 reply runs to STOP_TOKENS.
LONG_PROMPTS = ["Once upon a time", "Write a very long story.", "Tell me everything you know.",
                "Count to one thousand.", "Explain everything about attention in detail."]
STOP_TOKENS = 1000
ABORTED = 'vllm:request_success_total{finished_reason="abort"}'
LENGTH = 'vllm:request_success_total{finished_reason="length"}'
SKIP = 77  # the exit code CTest reports as skipped
LIBC = ctypes.CDLL(None)


def die_with_parent():
    """Runs in a child before exec: SIGKILL it when this script dies (a ctest timeout kills the
    script; the server and Chromium must not outlive it). Both are started before any thread."""
    LIBC.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Failure(Exception):
    pass


def check(cond, message):
    if not cond:
        raise Failure(message)


def wait_for(what, predicate, timeout, interval=0.05):
    """Polls predicate() until it returns a truthy value, which is returned."""
    deadline = time.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.time() > deadline:
            raise Failure(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def stop_process(proc, timeout=15):
    """SIGTERM to the process group of proc (started with start_new_session), then SIGKILL."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


class Server:
    """`mla serve -m MODEL --port 0 --api-key KEY --shutdown-timeout 0` (SIGTERM ends streams with
    an error event), ready once /health answers 200."""

    def __init__(self, binary, model, *args):
        self.log = []
        self.proc = subprocess.Popen(
            [binary, "serve", "-m", model, "--port", "0", "--api-key", API_KEY,
             "--shutdown-timeout", "0", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
            preexec_fn=die_with_parent)
        threading.Thread(target=self._drain, daemon=True).start()
        try:
            self._wait_ready()
        except BaseException:
            stop_process(self.proc)
            raise

    def _wait_ready(self):
        def port_logged():
            m = re.search(r"listening on http://[^:\s]+:(\d+)", "".join(self.log))
            check(m or self.proc.poll() is None,
                  "mla serve exited before listening:\n" + "".join(self.log))
            return m and int(m.group(1))

        port = wait_for("mla serve to log 'listening on'", port_logged, 60)
        self.url = f"http://127.0.0.1:{port}"
        try:
            wait_for("GET /health to answer 200", lambda: self.request("GET", "/health")[0] == 200
                     or self.proc.poll() is not None, 60)
        except Failure as e:
            raise Failure(f"{e}; mla serve logged:\n" + "".join(self.log)) from None
        check(self.proc.poll() is None, "mla serve exited while loading:\n" + "".join(self.log))
        self.model_id = self.request("GET", "/v1/models")[1]["data"][0]["id"]

    def _drain(self):  # keeps the server from blocking on a full stderr pipe
        for line in self.proc.stderr:
            self.log.append(line)

    def request(self, method, path, body=None):
        """(status, parsed JSON body or None); (None, None) when the server does not answer."""
        req = urllib.request.Request(self.url + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": "Bearer " + API_KEY,
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as res:
                status, raw = res.status, res.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        except OSError:
            return None, None
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, None

    def metrics(self):
        """The /metrics samples as {name and labels, model_name left out: value}."""
        req = urllib.request.Request(self.url + "/metrics",
                                     headers={"Authorization": "Bearer " + API_KEY})
        with urllib.request.urlopen(req, timeout=10) as res:
            text = res.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                series, value = line.rsplit(" ", 1)
                out[re.sub(r'model_name="[^"]*",?', "", series).replace("{}", "")] = float(value)
        return out


class WebSocket:
    """A minimal RFC 6455 client: text messages, masked client frames, no extensions."""

    def __init__(self, url, timeout=30):
        m = re.fullmatch(r"ws://([^/:]+):(\d+)(/.*)", url)
        check(m, f"unexpected WebSocket URL {url}")
        host, port, path = m.group(1), int(m.group(2)), m.group(3)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            check(chunk, "DevTools closed the WebSocket handshake")
            head += chunk
        head, _, self.buf = head.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        check(lines[0].split()[1:2] == ["101"], f"WebSocket handshake refused: {lines[0]}")
        accept = base64.b64encode(hashlib.sha1(
            (key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        fields = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
        check(fields.get("sec-websocket-accept") == accept, "bad Sec-WebSocket-Accept")

    def _send_frame(self, opcode, payload):
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        masked = (int.from_bytes(payload, "big") ^
                  int.from_bytes((mask * (n // 4 + 1))[:n], "big")).to_bytes(n, "big")
        self.sock.sendall(head + mask + masked)

    def send(self, text):
        self._send_frame(0x1, text.encode())

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            check(chunk, "DevTools closed the WebSocket")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self):
        """The next text message (fragments joined; pings answered)."""
        message = b""
        while True:
            b0, b1 = self._read(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            payload = self._read(n)
            if mask:
                payload = bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
            if opcode == 0x8:
                raise Failure("DevTools closed the WebSocket")
            if opcode == 0x9:
                self._send_frame(0xA, payload)
                continue
            if opcode in (0x0, 0x1, 0x2):
                message += payload
                if b0 & 0x80:
                    return message.decode()

    def close(self):
        try:
            self._send_frame(0x8, struct.pack(">H", 1000))
        except OSError:
            pass
        self.sock.close()


class Browser:
    """Headless Chromium on a temporary profile, one page driven over the DevTools protocol."""

    def __init__(self, binary):
        self.profile = tempfile.mkdtemp(prefix="mla-chat-page-")
        self.proc = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-dev-shm-usage", "--remote-debugging-port=0",
             f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=die_with_parent)
        self.ws = None
        try:
            self._connect()
        except BaseException:
            self.close()
            raise

    def _connect(self):
        port_file = os.path.join(self.profile, "DevToolsActivePort")

        def port_known():
            check(self.proc.poll() is None, f"chromium exited with {self.proc.returncode}")
            try:
                with open(port_file) as f:
                    lines = f.read().split("\n")
            except FileNotFoundError:
                return None
            return len(lines) >= 2 and lines[0].isdigit() and lines[0]

        port = wait_for("chromium's DevToolsActivePort", port_known, 60)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as res:
            pages = [t for t in json.load(res) if t.get("type") == "page"]
        check(pages, "chromium has no page target")
        self.ws = WebSocket(pages[0]["webSocketDebuggerUrl"])
        self.next_id = 0
        self.problems = []  # JavaScript exceptions and console errors, as text
        for domain in ("Page", "Runtime", "Log"):
            self.call(domain + ".enable")

    def _event(self, msg):
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Runtime.exceptionThrown":
            d = params.get("exceptionDetails", {})
            self.problems.append(
                "exception: " + d.get("exception", {}).get("description", d.get("text", "")))
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.problems.append("console.error: " + " ".join(
                str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            e = params["entry"]
            self.problems.append(f"log ({e.get('source')}): {e.get('text')} {e.get('url', '')}")

    def call(self, method, params=None):
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params or {}}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my_id:
                check("error" not in msg, f"{method}: {msg.get('error')}")
                return msg.get("result", {})
            self._event(msg)

    def js(self, expression):
        """Evaluates expression in the page (promises awaited) and returns its value."""
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": True})
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise Failure(f"page script failed: {expression!r}: "
                          f"{d.get('exception', {}).get('description', d.get('text'))}")
        return r["result"].get("value")

    def load(self, url):
        self.call("Page.navigate", {"url": url})
        wait_for(f"{url} to load", lambda: self.js(
            "document.readyState === 'complete' && !!document.getElementById('send')"), 30)

    def close(self):
        if self.ws:
            self.ws.close()
        stop_process(self.proc)
        shutil.rmtree(self.profile, ignore_errors=True)


# Page helpers: the last assistant bubble and its parts.
LAST = "[...document.querySelectorAll('#messages .msg.assistant')].at(-1)"


def set_field(b, element_id, value):
    b.js(f"(() => {{ const e = document.getElementById({json.dumps(element_id)});"
         f" e.value = {json.dumps(value)}; e.dispatchEvent(new Event('change')); }})()")


def reply(b, timeout=60):
    """Waits until the last assistant bubble's stream ended; returns {text, meta, error}."""
    wait_for("the assistant bubble to get data-done=\"1\"",
             lambda: b.js(f"{LAST}?.dataset.done === '1'"), timeout)
    return b.js(f"(() => {{ const m = {LAST}; return {{text: m.querySelector('.text').textContent,"
                " meta: m.querySelector('.meta').textContent,"
                " error: m.querySelector('.error').textContent}; })()")


def non_streamed(server, messages, max_tokens):
    status, body = server.request("POST", "/v1/chat/completions", {
        "model": server.model_id, "messages": messages, "temperature": 0, "max_tokens": max_tokens})
    check(status == 200, f"non-streamed request failed: {status} {body}")
    return body["choices"][0]["message"]["content"]


def model_label(b):
    return b.js("document.getElementById('model').textContent")


def check_api_key(b, server):
    """No key yet: /v1/models answers 401 and the page says so. Entering the key refetches; after
    a reload the key comes back from localStorage."""
    b.load(server.url + "/")
    wait_for("the page to report the missing key", lambda: "missing API key" in model_label(b), 10)
    set_field(b, "api-key", API_KEY)
    wait_for("the model id after entering the key", lambda: model_label(b) == server.model_id, 10)
    b.problems.clear()  # the 401 above is expected
    b.load(server.url + "/")
    check(b.js("document.getElementById('api-key').value") == API_KEY,
          "the API key did not survive a reload (localStorage)")
    wait_for("the model id after the reload", lambda: model_label(b) == server.model_id, 10)


def check_two_turns(b, server):
    """Turn 1 is sent with the Send button, turn 2 typed (Shift+Enter adds a line, Enter sends);
    at temperature 0 each streamed reply equals the non-streamed reply to the same history."""
    set_field(b, "temperature", "0")
    set_field(b, "max-tokens", "24")
    first = "Hello! <b>Tell</b> me about attention."
    set_field(b, "prompt", first)
    b.js("document.getElementById('send').click()")
    r1 = reply(b)
    check(b.js("document.querySelector('#messages .msg.user .text').textContent") == first and
          b.js("document.querySelector('#messages b')") is None,
          "the user's message is not shown as plain text")
    check(not r1["error"], f"turn 1 shows an error: {r1['error']}")
    check(r1["text"], "turn 1: the assistant bubble is empty")
    expected = non_streamed(server, [{"role": "user", "content": first}], 24)
    check(r1["text"] == expected,
          f"turn 1: the page shows {r1['text']!r}, the non-streamed reply is {expected!r}")
    check(re.search(r"\d+ prompt \+ 24 completion tokens .* tokens/s", r1["meta"]),
          f"turn 1: no usage line (prompt/completion tokens, tokens/s): {r1['meta']!r}")

    b.call("Runtime.evaluate", {"expression": "document.getElementById('prompt').focus()"})
    b.call("Input.insertText", {"text": "And"})
    enter = {"key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "text": "\r"}
    b.call("Input.dispatchKeyEvent", {"type": "keyDown", "modifiers": 8, **enter})  # 8: Shift
    b.call("Input.dispatchKeyEvent", {"type": "keyUp", "modifiers": 8, **enter})
    b.call("Input.insertText", {"text": "more?"})
    second = b.js("document.getElementById('prompt').value")
    check(second == "And\nmore?", f"Shift+Enter: the prompt holds {second!r}, not 'And\\nmore?'")
    check(b.js("document.querySelectorAll('#messages .msg').length") == 2,
          "Shift+Enter sent the message")
    b.call("Input.dispatchKeyEvent", {"type": "keyDown", **enter})
    b.call("Input.dispatchKeyEvent", {"type": "keyUp", **enter})
    r2 = reply(b)
    check(b.js("document.querySelectorAll('#messages .msg').length") == 4, "Enter did not send")
    check(not r2["error"] and r2["text"], f"turn 2: error {r2['error']!r}, text {r2['text']!r}")
    expected = non_streamed(server, [{"role": "user", "content": first},
                                     {"role": "assistant", "content": r1["text"]},
                                     {"role": "user", "content": second}], 24)
    check(r2["text"] == expected, f"turn 2: the page shows {r2['text']!r}, the non-streamed reply "
                                  f"to the same history is {expected!r}")


def check_http_error(b, server):
    """A 400 from the server: the bubble shows its error message and still ends."""
    set_field(b, "max-tokens", "-5")
    set_field(b, "prompt", "This request is invalid.")
    b.js("document.getElementById('send').click()")
    r = reply(b)
    status, body = server.request("POST", "/v1/chat/completions", {
        "model": server.model_id, "messages": [{"role": "user", "content": "x"}], "max_tokens": -5})
    check(status == 400, f"max_tokens -5 did not get 400 from the server: {status} {body}")
    check(body["error"]["message"] in r["error"] and r["error"].startswith("400"),
          f"the page shows {r['error']!r} for the error {body['error']}")
    check(not r["text"], f"an error reply has text {r['text']!r}")


def check_reasoning(b, server):
    """A server that splits R1 reasoning (--reasoning-parser deepseek_r1; the tiny model never
    closes its thought, so the whole reply is reasoning): the page shows it in a Reasoning block,
    equal to the non-streamed reasoning_content, and no answer text."""
    b.load(server.url + "/")  # another port: another origin, whose storage has no key yet
    set_field(b, "api-key", API_KEY)
    wait_for("the model id", lambda: model_label(b) == server.model_id, 10)
    b.problems.clear()  # the 401 before the key is expected
    set_field(b, "temperature", "0")
    set_field(b, "max-tokens", "24")
    set_field(b, "prompt", "Think about attention.")
    b.js("document.getElementById('send').click()")
    r = reply(b)
    shown = b.js(f"{LAST}.querySelector('details.reasoning > div')?.textContent")
    status, body = server.request("POST", "/v1/chat/completions", {
        "model": server.model_id, "messages": [{"role": "user", "content": "Think about attention."}],
        "temperature": 0, "max_tokens": 24})
    check(status == 200, f"non-streamed request failed: {status} {body}")
    expected = body["choices"][0]["message"]["reasoning_content"]
    check(expected and shown == expected,
          f"the Reasoning block shows {shown!r}, the non-streamed reasoning_content is {expected!r}")
    check(not r["text"] and not r["error"], f"reply text {r['text']!r}, error {r['error']!r}")


def find_long_prompt(server):
    """The first of LONG_PROMPTS whose temperature-0 reply runs to STOP_TOKENS, else None."""
    for prompt in LONG_PROMPTS:
        _, body = server.request("POST", "/v1/chat/completions", {
            "model": server.model_id, "messages": [{"role": "user", "content": prompt}],
            "temperature": 0, "max_tokens": STOP_TOKENS})
        if body["choices"][0]["finish_reason"] == "length":
            return prompt
    print(f"note: no test prompt gets {STOP_TOKENS} tokens from this model; Stop and the error "
          "event are not checked")
    return None


def send_long(b, prompt):
    """A fresh chat whose only request is the probed one (so it runs to STOP_TOKENS); returns
    once its first text is shown."""
    b.js("document.getElementById('clear').click()")
    set_field(b, "max-tokens", str(STOP_TOKENS))
    set_field(b, "prompt", prompt)
    b.js("document.getElementById('send').click()")
    wait_for("the first streamed text", lambda: b.js(
        f"{LAST}.querySelector('.text').textContent.length > 0 || {LAST}.dataset.done === '1'"),
        30, interval=0.01)


def check_stop(b, server, prompt):
    """Stop aborts the long reply after its first text; the server counts it as aborted."""
    before = server.metrics()
    send_long(b, prompt)
    # One script: the stream cannot end between the look and the click.
    done_before = b.js(f"(() => {{ const done = {LAST}.dataset.done === '1';"
                       " document.getElementById('stop').click(); return done; })()")
    r = reply(b)
    if done_before:
        print(f"note: the reply ended before Stop could be clicked ({r['meta']!r})")
        return
    check(r["meta"] == "stopped" and not r["error"],
          f"after Stop the bubble shows meta {r['meta']!r}, error {r['error']!r}")
    check(b.js("!document.getElementById('send').disabled && "
               "document.getElementById('stop').disabled"),
          "after Stop, Send is not enabled again or Stop is not disabled")

    def ended():  # under load the server may have generated the whole reply before the abort
        m = server.metrics()
        if m[ABORTED] > before[ABORTED]:
            return "abort"
        return m[LENGTH] > before[LENGTH] and "length"

    if wait_for("the server to end the stopped request", ended, 10) == "length":
        print("note: the server had finished the reply before the page's abort came")


def check_error_event(b, server, prompt):
    """SIGTERM with no drain time ends the long reply with an error event: the page keeps the
    text so far and shows the error. The server exits 0."""
    send_long(b, prompt)
    server.proc.send_signal(signal.SIGTERM)
    r = reply(b)
    check(server.proc.wait(timeout=30) == 0, f"mla serve exited with {server.proc.returncode}")
    if f"+ {STOP_TOKENS} completion tokens" in r["meta"] and not r["error"]:
        print("note: the server had finished the reply before SIGTERM; error event not seen")
        return
    check(r["text"] and r["error"] and not r["meta"], f"a reply ended by an error event shows "
          f"text {r['text']!r}, meta {r['meta']!r}, error {r['error']!r}")


def run(binary, model, chromium):
    server = browser = None
    try:
        browser = Browser(chromium)  # first: no thread runs yet (see die_with_parent)
        server = Server(binary, model)
        check_api_key(browser, server)
        check_two_turns(browser, server)
        check(not browser.problems, "JavaScript errors:\n  " + "\n  ".join(browser.problems))
        check_http_error(browser, server)
        prompt = find_long_prompt(server)
        if prompt:
            check_stop(browser, server, prompt)
            check_error_event(browser, server, prompt)
        problems = [p for p in browser.problems if "status of 400" not in p]  # the 400 is expected
        check(not problems, "JavaScript errors:\n  " + "\n  ".join(problems))
        stop_process(server.proc)
        server = Server(binary, model, "--reasoning-parser", "deepseek_r1")
        check_reasoning(browser, server)
    finally:
        if browser:
            browser.close()
        if server:
            stop_process(server.proc)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    chromium = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
    if not chromium:
        print("skipped: chromium is not installed (apt-get install chromium)")
        sys.exit(SKIP)
    try:
        run(sys.argv[1], sys.argv[2], chromium)
    except (Failure, OSError) as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)
    print("chat page: OK")


if __name__ == "__main__":
    main()
