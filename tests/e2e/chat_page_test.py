#!/usr/bin/env python3
"""The chat page `mla serve` answers at `GET /`, driven in headless Chromium over the DevTools
protocol (a minimal WebSocket client on the standard library, no packages): the API key field
(sent as a bearer token, kept in localStorage across a reload); settings (system prompt,
temperature, top-p, max tokens) kept across a reload and sent; a streamed reply equal to the
non-streamed reply to the same request at temperature 0, shown as its Markdown render; a second
turn typed with Enter (so the page sends the history); regenerate and edit-and-resend sending the
expected history; copy; the Markdown renderer (structure, HTML in replies and user messages kept
as text, the incremental render equal to a full one); conversations kept across a reload,
switched, created and deleted; a server error shown in the bubble; Stop aborting a long reply; R1
reasoning in its block; no main-thread task over 50 ms (a PerformanceObserver on 'longtask')
while 3,000-token replies stream; no JavaScript errors on the way. Exits 77 (skipped) when
Chromium is not installed.

Usage: chat_page_test.py MLA_BINARY MODEL_DIR [ENGLISH_MODEL_DIR]
       chat_page_test.py --screenshots OUT_DIR MLA_BINARY ENGLISH_MODEL_DIR
MODEL_DIR is tiny-v3 (any bytes come out: a fuzz of the renderer); the main thread is timed on
ENGLISH_MODEL_DIR (the bundled tiny-kjv; MODEL_DIR if not given). MLA_CHAT_PAGE_TOKENS sets the
length of the long replies (3,000).
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
# The long reply during which no main-thread task may pass 50 ms (MLA_CHAT_PAGE_TOKENS overrides).
LONG_TOKENS = 3000
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
    """`mla serve -m MODEL --port 0 --api-key KEY --shutdown-timeout 0 --threads 1` (SIGTERM ends
    streams with an error event), ready once /health answers 200. One compute thread at the
    lowest priority: Chromium's main thread is timed, and on a machine of few cores a server
    generating thousands of tokens a second would otherwise preempt it."""

    def __init__(self, binary, model, *args):
        self.log = []
        self.proc = subprocess.Popen(
            [binary, "serve", "-m", model, "--port", "0", "--api-key", API_KEY,
             "--shutdown-timeout", "0", "--threads", "1", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
            preexec_fn=lambda: (die_with_parent(), os.nice(19)))
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
            # 180 s: a non-streamed 3,000-token reply of the ASan build on a 2-core Zen 3 takes
            # 45-70 s (the 60 s that was here ran out).
            with urllib.request.urlopen(req, timeout=180) as res:
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
# Page helpers: the last assistant bubble and its parts.
LAST = "[...document.querySelectorAll('#messages .msg.assistant')].at(-1)"
# The conversation shown, as the page keeps it in localStorage.
STORED = ("JSON.parse(localStorage.getItem('mla.chat.' + localStorage.getItem('mla.currentChat'))"
          " || '{\"messages\": []}')")

# Run in the page before its own script on every load: records the body of each chat request the
# page sends (window.__sent), and, when window.__fake holds a text, answers the next chat request
# with that text as a stream of small content deltas and a usage chunk, as the server streams.
HOOKS = r"""
window.__sent = [];
window.__fake = null;
const realFetch = window.fetch;
window.fetch = (url, opts) => {
  if (!String(url).endsWith("/v1/chat/completions")) return realFetch(url, opts);
  window.__sent.push(JSON.parse(opts.body));
  const text = window.__fake;
  if (text === null) return realFetch(url, opts);
  window.__fake = null;
  const pieces = text.match(/[\s\S]{1,3}/g), enc = new TextEncoder();
  const event = (o) => "data: " + JSON.stringify(o) + "\n\n";
  let i = 0;
  const body = new ReadableStream({
    pull(c) {
      if (i < pieces.length) {
        c.enqueue(enc.encode(pieces.slice(i, i + 4).map((p) => event(
          {choices: [{index: 0, delta: {content: p}, finish_reason: null}]})).join("")));
        i += 4;
        return new Promise((r) => setTimeout(r, 1));
      }
      c.enqueue(enc.encode(event({choices: [{index: 0, delta: {}, finish_reason: "stop"}]}) +
        event({choices: [], usage: {prompt_tokens: 3, completion_tokens: pieces.length,
                                    total_tokens: 3 + pieces.length}}) + "data: [DONE]\n\n"));
      c.close();
    },
  });
  return Promise.resolve(new Response(body, {status: 200, headers: {"Content-Type": "text/event-stream"}}));
};
"""

# A reply as a model writes one, used for the screenshots and (with INJECTION) the Markdown checks.
SHOWCASE = """\
## Reversing a singly linked list

Walk the list once and turn each `next` pointer around. Three pointers are enough:

1. `prev`, the part already reversed (starts as `nullptr`);
2. `cur`, the node being moved;
3. `next`, saved **before** `cur->next` is overwritten.

```cpp
struct Node { int value; Node* next; };

// Returns the new head; O(n) time, O(1) extra space.
Node* reverse(Node* head) {
  Node* prev = nullptr;
  while (head != nullptr) {
    Node* next = head->next;
    head->next = prev;
    prev = head;
    head = next;
  }
  return prev;
}
```

| Approach | Time | Extra space |
|---|:-:|:-:|
| iterative | O(n) | O(1) |
| recursive | O(n) | O(n) stack |

> The recursive version is shorter, but a list of a million nodes *will* overflow the stack.

See [cppreference](https://en.cppreference.com/w/cpp/container/forward_list) for `std::forward_list`,
which offers `reverse()` directly.
"""

# Markup that must stay text: raw HTML, a javascript: link, an unclosed fence with HTML inside.
INJECTION = """
Raw <img src=x onerror="window.__pwned = 1"> and <script>window.__pwned = 2</script> stay text,
as do [a link](javascript:window.__pwned=3) and ![an image](https://example.com/x.png).
- a _list_ with <b>bold</b> and a nested one:
  - `<i>code</i>`

```html
<img src=x onerror="window.__pwned = 4">
"""
SAMPLE = SHOWCASE + INJECTION
USER_INJECTION = 'Please echo <img src=x onerror="window.__pwned = 5"> and <b>this</b>.'


def set_field(b, element_id, value):
    b.js(f"(() => {{ const e = document.getElementById({json.dumps(element_id)});"
         f" e.value = {json.dumps(value)}; e.dispatchEvent(new Event('change')); }})()")


def field(b, element_id):
    return b.js(f"document.getElementById({json.dumps(element_id)}).value")


def click(b, selector):
    check(b.js(f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
               " if (!e) return false; e.click(); return true; })()"), f"no element {selector}")


def reply(b, timeout=60):
    """Waits until the last assistant bubble's stream ended; returns {text (the reply as stored,
    the Markdown source), shown (the bubble's text), meta, error}."""
    wait_for("the assistant bubble to get data-done=\"1\"",
             lambda: b.js(f"{LAST}?.dataset.done === '1'"), timeout)
    return b.js(f"(() => {{ const m = {LAST}; const last = {STORED}.messages.at(-1);"
                " return {text: last.role === 'assistant' ? last.content : null,"
                " shown: m.querySelector('.text').textContent,"
                " meta: m.querySelector('.meta').textContent,"
                " error: m.querySelector('.error').textContent}; })()")


def sent(b):
    """The chat requests the page sent since it was loaded (the HOOKS recorder)."""
    return b.js("window.__sent")


def non_streamed(server, messages, max_tokens, **extra):
    status, body = server.request("POST", "/v1/chat/completions", {
        "model": server.model_id, "messages": messages, "temperature": 0, "max_tokens": max_tokens,
        **extra})
    check(status == 200, f"non-streamed request failed: {status} {body}")
    return body["choices"][0]["message"]["content"]


def model_label(b):
    return b.js("document.getElementById('model').textContent")


def load_ready(b, server):
    b.load(server.url + "/")
    wait_for("the model id", lambda: model_label(b) == server.model_id, 10)


def rendered_as_markdown(b, bubble, source):
    """Whether the bubble's text is the page's full render of source (the kept blocks and an empty
    tail after a stream, or the render of a stored message)."""
    return b.js(f"(() => {{ const t = {bubble}.querySelector('.text');"
                " const ref = document.createElement('div');"
                f" ref.innerHTML = window.mlaMarkdown.render({json.dumps(source)});"
                " return t.innerHTML.replace(/<div class=\"md-tail\"><\\/div>$/, '') === ref.innerHTML;"
                " })()")


def check_api_key(b, server):
    """No key yet: /v1/models answers 401 and the page says so. Entering the key refetches; after
    a reload the key comes back from localStorage."""
    b.load(server.url + "/")
    wait_for("the page to report the missing key", lambda: "missing API key" in model_label(b), 10)
    set_field(b, "api-key", API_KEY)
    wait_for("the model id after entering the key", lambda: model_label(b) == server.model_id, 10)
    b.problems.clear()  # the 401 above is expected
    load_ready(b, server)
    check(field(b, "api-key") == API_KEY, "the API key did not survive a reload (localStorage)")


def check_settings(b, server):
    """System prompt, temperature, top-p and max tokens survive a reload and go into the request."""
    values = {"system": "You are brief.", "temperature": "0.3", "top-p": "0.85", "max-tokens": "5"}
    for k, v in values.items():
        set_field(b, k, v)
    load_ready(b, server)
    for k, v in values.items():
        check(field(b, k) == v, f"setting {k}: {field(b, k)!r} after a reload, not {v!r}")
    set_field(b, "prompt", "Hi")
    click(b, "#send")
    r = reply(b)
    check(not r["error"], f"the reply shows an error: {r['error']}")
    body = sent(b)[-1]
    check(body["messages"] == [{"role": "system", "content": "You are brief."},
                               {"role": "user", "content": "Hi"}] and
          body["temperature"] == 0.3 and body["top_p"] == 0.85 and body["max_tokens"] == 5 and
          body["stream_options"] == {"include_usage": True},
          f"the settings are not in the request the page sent: {body}")
    set_field(b, "system", "")
    set_field(b, "top-p", "1")
    click(b, "#clear")


def check_two_turns(b, server):
    """Turn 1 is sent with the Send button, turn 2 typed (Shift+Enter adds a line, Enter sends);
    at temperature 0 each streamed reply equals the non-streamed reply to the same history, and
    the bubble shows its Markdown render."""
    set_field(b, "temperature", "0")
    set_field(b, "max-tokens", "24")
    first = "Hello! <b>Tell</b> me about attention."
    set_field(b, "prompt", first)
    click(b, "#send")
    r1 = reply(b)
    check(b.js("document.querySelector('#messages .msg.user .text').textContent") == first and
          b.js("document.querySelector('#messages b')") is None,
          "the user's message is not shown as plain text")
    check(not r1["error"], f"turn 1 shows an error: {r1['error']}")
    check(r1["text"], "turn 1: the reply is empty")
    expected = non_streamed(server, [{"role": "user", "content": first}], 24)
    check(r1["text"] == expected,
          f"turn 1: the page has {r1['text']!r}, the non-streamed reply is {expected!r}")
    check(rendered_as_markdown(b, LAST, r1["text"]), "turn 1: the bubble is not the reply's render")
    check(re.search(r"\d+ prompt \+ 24 completion tokens .* tokens/s", r1["meta"]),
          f"turn 1: no usage line (prompt/completion tokens, tokens/s): {r1['meta']!r}")

    b.call("Runtime.evaluate", {"expression": "document.getElementById('prompt').focus()"})
    b.call("Input.insertText", {"text": "And"})
    enter = {"key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "text": "\r"}
    b.call("Input.dispatchKeyEvent", {"type": "keyDown", "modifiers": 8, **enter})  # 8: Shift
    b.call("Input.dispatchKeyEvent", {"type": "keyUp", "modifiers": 8, **enter})
    b.call("Input.insertText", {"text": "more?"})
    second = field(b, "prompt")
    check(second == "And\nmore?", f"Shift+Enter: the prompt holds {second!r}, not 'And\\nmore?'")
    check(b.js("document.querySelectorAll('#messages .msg').length") == 2,
          "Shift+Enter sent the message")
    b.call("Input.dispatchKeyEvent", {"type": "keyDown", **enter})
    b.call("Input.dispatchKeyEvent", {"type": "keyUp", **enter})
    r2 = reply(b)
    check(b.js("document.querySelectorAll('#messages .msg').length") == 4, "Enter did not send")
    check(not r2["error"] and r2["text"], f"turn 2: error {r2['error']!r}, text {r2['text']!r}")
    history = [{"role": "user", "content": first}, {"role": "assistant", "content": r1["text"]},
               {"role": "user", "content": second}]
    check(sent(b)[-1]["messages"] == history, f"turn 2 sent {sent(b)[-1]['messages']}")
    expected = non_streamed(server, history, 24)
    check(r2["text"] == expected, f"turn 2: the page has {r2['text']!r}, the non-streamed reply "
                                  f"to the same history is {expected!r}")
    return history + [{"role": "assistant", "content": r2["text"]}]


def check_regenerate_edit(b, server, history):
    """Regenerate sends the conversation without its last reply (at temperature 0 the same reply
    comes back); editing the first message and sending it drops everything after it, and the
    edited text (with HTML in it) is shown as text."""
    n = len(sent(b))
    click(b, "#messages .msg.assistant:last-child .regen")
    r = reply(b)
    check(len(sent(b)) == n + 1 and sent(b)[-1]["messages"] == history[:-1],
          f"Regenerate sent {sent(b)[n:]}, expected one request with {history[:-1]}")
    check(r["text"] == history[-1]["content"] and not r["error"],
          f"Regenerate at temperature 0 gave {r['text']!r} (error {r['error']!r}), "
          f"before {history[-1]['content']!r}")
    check(b.js(f"{STORED}.messages.length") == 4 and
          b.js("document.querySelectorAll('#messages .msg').length") == 4,
          "after Regenerate the conversation does not have 4 messages")

    click(b, "#messages .msg.user .edit")
    check(b.js("document.querySelector('.editor .edit-box').value") == history[0]["content"],
          "the editor does not hold the message")
    b.js(f"document.querySelector('.editor .edit-box').value = {json.dumps(USER_INJECTION)}")
    click(b, ".editor .edit-send")
    r = reply(b)
    check(sent(b)[-1]["messages"] == [{"role": "user", "content": USER_INJECTION}],
          f"edit-and-resend sent {sent(b)[-1]['messages']}")
    expected = non_streamed(server, [{"role": "user", "content": USER_INJECTION}], 24)
    check(r["text"] == expected, f"after the edit the page has {r['text']!r}, expected {expected!r}")
    users = b.js("[...document.querySelectorAll('#messages .msg.user .text')].map((e) => e.textContent)")
    check(users == [USER_INJECTION], f"after the edit the user messages shown are {users}")
    check(b.js("document.querySelectorAll('#messages img, #messages b').length") == 0 and
          b.js("window.__pwned") is None, "HTML in a user message became elements")


def check_copy(b):
    """Copy on a reply copies its Markdown source (the clipboard API is replaced by a recorder)."""
    b.js("navigator.clipboard.writeText = async (t) => { window.__copied = t; }")
    click(b, "#messages .msg.assistant:last-child .copy")
    wait_for("the copied text", lambda: b.js("window.__copied !== undefined"), 5)
    check(b.js("window.__copied") == b.js(f"{STORED}.messages.at(-1).content"),
          "Copy did not copy the reply")


def check_markdown(b):
    """The renderer: structure of a full render, HTML injection kept as text, and the incremental
    view equal to a full render of each prefix of the text fed in small random pieces. Then a
    streamed reply (the HOOKS fake stream) through the page: the bubble is the full render,
    highlighted code in <pre><code>, no element from the reply's HTML, Copy on a code block."""
    lacks = b.js(r"""(() => {
      const d = document.createElement('div');
      d.innerHTML = window.mlaMarkdown.render(%s);
      const ok = (sel) => d.querySelector(sel) !== null;
      const bad = ['h2', 'ol > li > code', 'strong', 'em', 'pre > code.language-cpp > span.tk-k',
        'pre > code span.tk-c', 'table th', 'blockquote em', 'a[href^="https://en.cppreference.com/"]',
        'ul > li > ul > li > code'].filter((s) => !ok(s));
      if (d.querySelectorAll('img, script, b, i, a[href^="javascript"]').length) bad.push('injected element');
      if (!d.textContent.includes('<img src=x onerror="window.__pwned = 1">')) bad.push('raw html text');
      if (!d.textContent.includes('<script>window.__pwned = 2</script>')) bad.push('script text');
      return bad.join(', ') || true;
    })()""" % json.dumps(SAMPLE))
    check(lacks is True, f"the Markdown render of SAMPLE lacks: {lacks}")

    mismatch = b.js(r"""(() => {
      const md = window.mlaMarkdown, src = %s;
      const el = document.createElement('div'), v = new md.View(el), ref = document.createElement('div');
      let seed = 7, pos = 0;
      while (pos < src.length) {
        seed = (seed * 48271) %% 2147483647;
        pos = Math.min(src.length, pos + 1 + seed %% 9);
        const final = pos === src.length;
        v.update(src.slice(0, pos), final);
        ref.innerHTML = md.render(src.slice(0, pos));
        const shown = el.innerHTML.slice(0, -v.tail.outerHTML.length) + v.tail.innerHTML;
        if (shown !== ref.innerHTML) return {pos, shown, full: ref.innerHTML};
      }
      return null;
    })()""" % json.dumps(SAMPLE))
    check(mismatch is None, f"the incremental render differs from the full one: {mismatch}")

    click(b, "#clear")
    b.js(f"window.__fake = {json.dumps(SAMPLE)}")
    set_field(b, "prompt", "Show me some Markdown.")
    click(b, "#send")
    r = reply(b)
    check(r["text"] == SAMPLE and not r["error"], f"the fake stream ended as {r}")
    check(rendered_as_markdown(b, LAST, SAMPLE), "the streamed reply is not the full render")
    check(b.js(f"{LAST}.querySelector('pre > code.language-cpp span.tk-k') !== null"),
          "no highlighted <pre><code> in the streamed reply")
    check(b.js("document.querySelectorAll('#messages img, #messages script, #messages b').length") == 0
          and b.js("window.__pwned") is None, "HTML in the streamed reply became elements")
    check(re.fullmatch(r"3 prompt \+ \d+ completion tokens · .* tokens/s", r["meta"]),
          f"usage line {r['meta']!r}")
    b.js("window.__copied = undefined; navigator.clipboard.writeText = async (t) => { window.__copied = t; }")
    click(b, "#messages .msg.assistant:last-child .code .copy-code")
    wait_for("the copied code", lambda: b.js("window.__copied !== undefined"), 5)
    code = SHOWCASE.split("```cpp\n")[1].split("\n```")[0]
    check(b.js("window.__copied") == code, "Copy on the code block did not copy the code")


def long_reply(b, prompt, tokens):
    """Sends prompt for `tokens` tokens (ignore_eos) with a PerformanceObserver on long tasks;
    returns (the reply, the long tasks' durations in ms, the longest delay of a 5 ms timer in ms:
    how long the main thread was busy at most, also below the 50 ms of a long task)."""
    set_field(b, "max-tokens", str(tokens))
    set_field(b, "extra", '{"ignore_eos": true}')
    b.js("window.__long = []; new PerformanceObserver((l) => {"
         " for (const e of l.getEntries()) window.__long.push(e.duration); }).observe({type: 'longtask'})")
    # The observer sees a task we know is long (so an empty list below means no long task).
    b.js("new Promise((r) => setTimeout(() => { const t = performance.now();"
         " while (performance.now() - t < 80); r(); }, 0))")
    wait_for("the observer to report an 80 ms task", lambda: b.js("window.__long.length"), 5)
    b.js("window.__long = []; window.__lag = 0; let due = performance.now() + 5;"
         " window.__probe = setInterval(() => { const now = performance.now();"
         " window.__lag = Math.max(window.__lag, now - due); due = now + 5; }, 5)")
    set_field(b, "prompt", prompt)
    click(b, "#send")
    # 3,000 tokens: the ASan build on a 2-core Zen 3 streams them at ~59-76 tokens/s (40-51 s).
    r = reply(b, timeout=180)
    set_field(b, "extra", "")
    time.sleep(0.2)  # entries are delivered after the task
    return r, b.js("window.__long"), b.js("clearInterval(window.__probe), window.__lag")


def check_long_reply(b, server, tokens, timed):
    """A reply of `tokens` tokens: the text equals the non-streamed reply and the bubble its full
    Markdown render; when timed, no task on the main thread over 50 ms while it streams."""
    click(b, "#clear")
    prompt = "Write a very long story."
    r, tasks, lag = long_reply(b, prompt, tokens)
    check(not r["error"] and f"+ {tokens} completion tokens" in r["meta"],
          f"the long reply ended with error {r['error']!r}, meta {r['meta']!r}")
    worst = max(tasks, default=0)
    print(f"long reply from {server.model_id}: {tokens} tokens ({len(r['text'])} characters), "
          f"{r['meta']}; main-thread tasks over 50 ms: {len(tasks)} (worst {worst:.0f} ms); "
          f"longest timer delay {lag:.0f} ms" + ("" if timed else " (not checked)"))
    check(not timed or not tasks, f"tasks over 50 ms on the main thread while streaming: {tasks}")
    expected = non_streamed(server, [{"role": "user", "content": prompt}], tokens, ignore_eos=True)
    check(r["text"] == expected, "the long reply differs from the non-streamed one")
    check(rendered_as_markdown(b, LAST, r["text"]), "the long reply is not its full render")
    return worst


def check_conversations(b, server):
    """The conversations are kept across a reload; the list switches between them; New chat
    starts an empty one; Delete (two clicks) removes one from the list and from storage."""
    index = b.js("JSON.parse(localStorage.getItem('mla.chats'))")
    check(len(index) >= 3, f"expected at least 3 saved conversations, have {index}")
    rows = lambda: b.js("[...document.querySelectorAll('#chats .chat-item')].map((e) => e.dataset.id)")
    check(rows() == [e["id"] for e in index], f"the list shows {rows()}, storage has {index}")
    shown = lambda: b.js("[...document.querySelectorAll('#messages .msg')].map((e) => e.className.split(' ')[1])")
    current = b.js(STORED)
    load_ready(b, server)
    check(b.js(STORED) == current, "the stored conversation changed on reload")
    check(shown() == [m["role"] for m in current["messages"]],
          f"after a reload the page shows {shown()}, stored {[m['role'] for m in current['messages']]}")
    check(rendered_as_markdown(b, LAST, current["messages"][-1]["content"]),
          "after a reload the last reply is not its render")

    other = index[1]["id"]
    click(b, f"#chats .chat-item[data-id='{other}'] .open")
    stored = b.js(f"JSON.parse(localStorage.getItem('mla.chat.{other}'))")
    check(b.js("localStorage.getItem('mla.currentChat')") == other and
          shown() == [m["role"] for m in stored["messages"]] and
          b.js("[...document.querySelectorAll('#messages .msg.user .text')].map((e) => e.textContent)") ==
          [m["content"] for m in stored["messages"] if m["role"] == "user"],
          "switching to another conversation does not show it")
    check(b.js("document.querySelector('#chats .current').dataset.id") == other,
          "the list does not mark the conversation shown")
    click(b, "#clear")
    check(b.js("document.querySelectorAll('#messages .msg').length") == 0 and len(rows()) == len(index),
          "New chat did not start an empty conversation (or saved an empty one)")

    click(b, f"#chats .chat-item[data-id='{other}'] .del")
    check(other in rows(), "one click on Delete deleted the conversation")
    click(b, f"#chats .chat-item[data-id='{other}'] .del")
    check(other not in rows() and len(rows()) == len(index) - 1 and
          b.js(f"localStorage.getItem('mla.chat.{other}')") is None and
          other not in [e["id"] for e in b.js("JSON.parse(localStorage.getItem('mla.chats'))")],
          "Delete did not remove the conversation")
    click(b, f"#chats .chat-item[data-id='{index[0]['id']}'] .open")


def check_http_error(b, server):
    """A 400 from the server: the bubble shows its error message and still ends."""
    set_field(b, "max-tokens", "-5")
    set_field(b, "prompt", "This request is invalid.")
    click(b, "#send")
    r = reply(b)
    status, body = server.request("POST", "/v1/chat/completions", {
        "model": server.model_id, "messages": [{"role": "user", "content": "x"}], "max_tokens": -5})
    check(status == 400, f"max_tokens -5 did not get 400 from the server: {status} {body}")
    check(body["error"]["message"] in r["error"] and r["error"].startswith("400"),
          f"the page shows {r['error']!r} for the error {body['error']}")
    check(not r["text"] and not r["shown"], f"an error reply has text {r['text']!r}")
    set_field(b, "max-tokens", "24")


def load_new_origin(b, server):
    b.load(server.url + "/")  # another port: another origin, whose storage has no key yet
    set_field(b, "api-key", API_KEY)
    wait_for("the model id", lambda: model_label(b) == server.model_id, 10)
    b.problems.clear()  # the 401 before the key is expected
    set_field(b, "temperature", "0")


def check_reasoning(b, server, tokens):
    """A server that splits R1 reasoning (--reasoning-parser deepseek_r1; the tiny models never
    close their thought, so the whole reply is reasoning): the page shows it in a Reasoning block,
    equal to the non-streamed reasoning_content, and no answer text. A long reasoning reply
    streams with no main-thread task over 50 ms either."""
    load_new_origin(b, server)
    set_field(b, "max-tokens", "24")
    set_field(b, "prompt", "Think about attention.")
    click(b, "#send")
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

    click(b, "#clear")
    r, tasks, lag = long_reply(b, "Think for a long time.", tokens)
    worst = max(tasks, default=0)
    thought = b.js(f"{STORED}.messages.at(-1).reasoning")
    print(f"long reasoning from {server.model_id}: {tokens} tokens ({len(thought or '')} characters), {r['meta']}; "
          f"main-thread tasks over 50 ms: {len(tasks)} (worst {worst:.0f} ms); "
          f"longest timer delay {lag:.0f} ms")
    check(f"+ {tokens} completion tokens" in r["meta"] and thought and
          b.js(f"{LAST}.querySelector('details.reasoning > div').textContent") == thought,
          f"the long reasoning reply is not shown whole (meta {r['meta']!r})")
    check(not tasks, f"tasks over 50 ms on the main thread while streaming reasoning: {tasks}")
    return worst


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
    click(b, "#clear")
    set_field(b, "max-tokens", str(STOP_TOKENS))
    set_field(b, "prompt", prompt)
    click(b, "#send")
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
    check(r["meta"] == "stopped" and not r["error"] and r["text"],
          f"after Stop the bubble shows meta {r['meta']!r}, error {r['error']!r}, "
          f"and the text so far is {'kept' if r['text'] else 'lost'}")
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


def no_problems(b, expected=()):
    problems = [p for p in b.problems if not any(e in p for e in expected)]
    check(not problems, "JavaScript errors:\n  " + "\n  ".join(problems))


def run(binary, model, english, chromium, tokens):
    """model: the test model (tiny-v3, whose random-weight replies are any bytes: a fuzz of the
    Markdown renderer); english: a model writing text (the bundled tiny-kjv), on which the
    main thread is timed, since shaping random glyphs of all scripts is no reply's real cost."""
    server = browser = None
    try:
        browser = Browser(chromium)  # first: no thread runs yet (see die_with_parent)
        browser.call("Page.addScriptToEvaluateOnNewDocument", {"source": HOOKS})
        server = Server(binary, model)
        check_api_key(browser, server)
        check_settings(browser, server)
        history = check_two_turns(browser, server)
        check_regenerate_edit(browser, server, history)
        check_copy(browser)
        no_problems(browser)
        check_http_error(browser, server)
        check_markdown(browser)
        check_long_reply(browser, server, tokens, timed=False)
        check_conversations(browser, server)
        prompt = find_long_prompt(server)
        if prompt:
            check_stop(browser, server, prompt)
            check_error_event(browser, server, prompt)
        no_problems(browser, ["status of 400"])  # the 400 is expected
        stop_process(server.proc)
        server = Server(binary, english, "--reasoning-parser", "deepseek_r1")
        worst = check_reasoning(browser, server, tokens)
        stop_process(server.proc)
        server = Server(binary, english)
        load_new_origin(browser, server)
        worst = max(worst, check_long_reply(browser, server, tokens, timed=True))
        no_problems(browser)
        print(f"worst main-thread task over 50 ms while streaming: "
              f"{f'{worst:.0f} ms' if worst else 'none'}")
    finally:
        if browser:
            browser.close()
        if server:
            stop_process(server.proc)


def screenshots(binary, model, chromium, out_dir):
    """Writes chat-light.png (a conversation with Markdown and a highlighted code block) and
    chat-dark.png (a reply streamed from the model with its token counts, settings open)."""
    server = browser = None
    try:
        browser = Browser(chromium)
        server = Server(binary, model)
        browser.call("Emulation.setDeviceMetricsOverride",
                     {"width": 1180, "height": 820, "deviceScaleFactor": 1, "mobile": False})
        browser.load(server.url + "/")
        now = int(time.time() * 1000)
        chats = [("Reversing a singly linked list", [
                     {"role": "user", "content": "How do I reverse a singly linked list in C++?"},
                     {"role": "assistant", "content": SHOWCASE}]),
                 ("Explain multi-head latent attention", []),
                 ("Summarise Genesis chapter 1", [])]
        index = []
        for k, (title, msgs) in enumerate(chats):
            cid = f"shot{k}"
            msgs = msgs or [{"role": "user", "content": title}, {"role": "assistant", "content": "…"}]
            browser.js(f"localStorage.setItem('mla.chat.{cid}', {json.dumps(json.dumps({'id': cid, 'title': title, 'created': now - k * 3600_000, 'updated': now - k * 3600_000, 'messages': msgs}))})")
            index.append({"id": cid, "title": title, "updated": now - k * 3600_000})
        browser.js(f"localStorage.setItem('mla.chats', {json.dumps(json.dumps(index))});"
                   f"localStorage.setItem('mla.currentChat', 'shot0');"
                   f"localStorage.setItem('mla.apiKey', {json.dumps(API_KEY)})")
        load_ready(browser, server)
        browser.js("document.getElementById('messages').scrollTop = 0")
        shot(browser, os.path.join(out_dir, "chat-light.png"))

        browser.call("Emulation.setEmulatedMedia",
                     {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        click(browser, "#clear")
        set_field(browser, "temperature", "0.7")
        set_field(browser, "max-tokens", "120")
        set_field(browser, "system", "You are a storyteller.")
        set_field(browser, "prompt", "Tell me about the beginning.")
        click(browser, "#send")
        reply(browser)
        browser.js("document.querySelector('header details').open = true")
        shot(browser, os.path.join(out_dir, "chat-dark.png"))
    finally:
        if browser:
            browser.close()
        if server:
            stop_process(server.proc)


def shot(b, path):
    time.sleep(0.3)
    png = base64.b64decode(b.call("Page.captureScreenshot", {"format": "png"})["data"])
    with open(path, "wb") as f:
        f.write(png)
    print(f"wrote {path} ({len(png)} bytes)")


def main():
    args = sys.argv[1:]
    out_dir = None
    if args[:1] == ["--screenshots"] and len(args) >= 2:
        out_dir, args = args[1], args[2:]
    if len(args) not in (2, 3):
        sys.exit(__doc__)
    chromium = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
    if not chromium:
        print("skipped: chromium is not installed (apt-get install chromium)")
        sys.exit(SKIP)
    try:
        if out_dir:
            screenshots(args[0], args[1], chromium, out_dir)
        else:
            run(args[0], args[1], args[-1], chromium,
                int(os.environ.get("MLA_CHAT_PAGE_TOKENS", LONG_TOKENS)))
    except (Failure, OSError) as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)
    print("chat page: OK")


if __name__ == "__main__":
    main()
