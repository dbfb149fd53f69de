#!/usr/bin/env python3
"""Fault tests of `mla serve` (docs/RELIABILITY.md §Checklist, L6-L8 and L10-L12) on loopback
against the real binary: slowloris, big and broken bodies, a protocol fuzz over sockets, graceful
shutdown with and without drain, a memory ceiling (RLIMIT_AS, as `ulimit -v`), and broken
checkpoints at startup (R1-R20 files generated from `mla make-tiny` models). Every test has a
bounded request count and wall time.

Sizes: a CI size by default, the full checklist sizes with MLA_LOAD_FULL=1. Each test prints one
`RESULT Lx:` line with what it measured (docs/RELIABILITY.md collects them).

Usage: fault_test.py MLA_BINARY MODEL_DIR
"""
import errno
import gzip
import json
import os
import random
import re
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import zlib

from load_tools import (FULL, Bad, LoadResult, Mutator, bad_requests, baseline, baseline_fds, greedy_equal,
                        parse_output,
                        http_bytes, log, make_specs, parse_responses, percentile, proc_status,
                        read_response, run_load, scaled, send, settle, Spec, exchange_one,
                        fuzz_exchange)
from bad_checkpoints import (model_bytes, write_safetensors, read_safetensors, make_big_model,
                             st_rewrite, first_tensor, last_tensor, edit_config, edit_config_text,
                             rename_tensor, edit_index, copy_embedding_into_s2, alias_layernorms,
                             shard_cases, config_cases)
from mla_server import MlaServer, find_binary_and_model, sse_events

BINARY, MODEL = map(os.path.abspath, find_binary_and_model(sys.argv))
FD_TOLERANCE = 1  # see load_test.py
KV_BYTES = str(64 << 20)


def stop_clean(test, server):
    rc = server.stop()
    text = "".join(server.log)
    for bad in ("LeakSanitizer", "AddressSanitizer", "runtime error:", "terminate called"):
        test.assertNotIn(bad, text)
    test.assertEqual(rc, 0, text[-2000:])
    return rc


class RssSampler:
    """Samples a process's VmRSS every 5 ms on a thread of its own; .peak is the largest seen."""

    def __init__(self, pid):
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, proc_status(self.pid).get("VmRSS", 0))
            time.sleep(0.005)

    def stop(self):
        self._stop.set()
        self._t.join()
        return self.peak


# --- L6 ------------------------------------------------------------------------------------------

class L6Slowloris(unittest.TestCase):
    """200 connections sending one header byte per second, on a server whose connection threads
    are fewer than 200 (--max-queue 16: 16 + 160 = 176 threads; `mla serve` has no
    max_connections flag, its thread count plays that part, as 128 does in L6). A normal client is
    served within 1 s throughout; the server closes the slow connections at the 10 s header
    timeout (by 12 s, allowing 2 s of scheduling slack); open fds return to the baseline."""

    def test_l6_slowloris(self):
        s = MlaServer(BINARY, MODEL, "--max-queue", "16", "--kv-cache-bytes", KV_BYTES)
        conns = []
        try:
            fds0 = baseline_fds(s)
            n = 200
            line = b"GET /health HTTP/1.1\r\nX-Slow: " + b"a" * 1000
            closed_at = [None] * n
            normal = []
            duration = scaled(15, 30)
            stop = threading.Event()
            t0 = time.monotonic()

            def normal_client():
                # A normal client, twice a second (bounded wait of 3 s), on a thread of its own.
                while not stop.is_set():
                    t = time.monotonic()
                    st, _, _ = s.request("GET", "/v1/models", timeout=3)
                    normal.append((t - t0, time.monotonic() - t, st))
                    stop.wait(0.5)

            nt = threading.Thread(target=normal_client)
            nt.start()
            # Non-blocking connects: opening the 200 must not wait on the server's accept queue.
            for _ in range(n):
                c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                c.setblocking(False)
                c.connect_ex(("127.0.0.1", s.port))
                conns.append(c)
            sent = [0] * n
            i = 0
            next_byte = time.monotonic()
            while time.monotonic() - t0 < duration:
                send_now = time.monotonic() >= next_byte
                for k, c in enumerate(conns):
                    if closed_at[k] is not None:
                        continue
                    try:
                        if c.recv(4096) == b"" and sent[k]:
                            closed_at[k] = time.monotonic() - t0
                            continue
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError as e:
                        if e.errno not in (errno.ENOTCONN, errno.EAGAIN):
                            closed_at[k] = time.monotonic() - t0
                        continue
                    if send_now:
                        try:
                            c.send(line[i:i + 1])
                            sent[k] += 1
                        except (BlockingIOError, InterruptedError):
                            pass
                        except OSError as e:
                            if e.errno not in (errno.ENOTCONN, errno.EAGAIN):
                                closed_at[k] = time.monotonic() - t0
                if send_now:
                    i += 1
                    next_byte += 1.0
                time.sleep(0.05)
            stop.set()
            nt.join()
            never = sum(1 for k in range(n) if sent[k] == 0)
            gauges = {k: v for k, v in s.metrics().items() if "connections" in k}
            still_open = sum(1 for x in closed_at if x is None)
            late = [x for x in closed_at if x is not None and x > 12]
            first_close = min((x for x in closed_at if x is not None), default=None)
            worst = max(normal, key=lambda x: x[1])
            for c in conns:
                c.close()
            conns = []
            m = settle(s, fds0, FD_TOLERANCE, timeout=15)
            log(f"RESULT L6: {n} slow connections for {duration} s ({never} never connected): "
                f"{n - still_open} closed by the "
                f"server (first at {first_close if first_close is None else round(first_close, 1)}"
                f" s, {len(late)} after 12 s), {still_open} still open at the end; normal client "
                f"{len(normal)} requests, statuses "
                f"{sorted(set(x[2] for x in normal), key=str)}, worst {worst[1]:.2f} s at "
                f"t={worst[0]:.1f} s; server gauges then {gauges}; fd delta after closing ours "
                f"{m['process_open_fds'] - fds0:+.0f}")
            self.assertTrue(all(x[2] == 200 and x[1] <= 1.0 for x in normal),
                            f"a normal client was not served within 1 s: "
                            f"{[x for x in normal if x[2] != 200 or x[1] > 1.0][:5]}")
            self.assertEqual(still_open, 0, "slow connections were never closed by the server")
            self.assertEqual(late, [])
        finally:
            for c in conns:
                c.close()
            stop_clean(self, s)


# --- L7 ------------------------------------------------------------------------------------------

def gzip_bomb(out_mib=1024):
    """A gzip stream of about 1 MiB that inflates to out_mib MiB of zeros."""
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    zero = bytes(1 << 20)
    parts = [co.compress(zero) for _ in range(out_mib)]
    parts.append(co.flush())
    return b"".join(parts)


class L7BigAndBrokenBodies(unittest.TestCase):
    """A 100 MiB Content-Length (headers only, then with the body streamed), an endless chunked
    body, negative and overlong chunk sizes, a gzip bomb (about 1 MiB inflating to 1 GiB), and
    Transfer-Encoding with Content-Length: each gets 413/400/415 (or 411, which `mla serve`
    answers to every body without a plain Content-Length) or a close, quickly (413 before the body
    is read: within 1 s); the server's RSS never exceeds its baseline + 2 x the body cap (4 MiB);
    it keeps serving."""

    CAP = 4 << 20

    def test_l7_big_and_broken_bodies(self):
        s = MlaServer(BINARY, MODEL, "--max-body-bytes", str(self.CAP), "--kv-cache-bytes",
                      KV_BYTES)
        results, failures = [], []
        try:
            fds0 = baseline_fds(s)
            rss0 = proc_status(s.proc.pid)["VmRSS"]
            sampler = RssSampler(s.proc.pid)
            head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Type: application/json\r\n")

            def record(name, ok, what):
                results.append(f"{name}: {what}")
                if not ok:
                    failures.append(f"{name}: {what}")

            # 1. Content-Length 100 MiB, headers only: 413 at once, before any body byte.
            out, first, closed = read_response(
                s.port, head + b"Content-Length: 104857600\r\n\r\n", timeout=15)
            st = out[9:12].decode(errors="replace")
            record("CL 100 MiB, no body", st == "413" and first is not None and first < 1.0,
                   f"status {st} after {first if first is None else round(first, 2)} s")

            # 2. Content-Length 100 MiB with the body streamed: 413 or a close, without the server
            #    reading the 100 MiB first.
            c = socket.create_connection(("127.0.0.1", s.port), timeout=15)
            c.sendall(head + b"Content-Length: 104857600\r\n\r\n")
            sent, t = 0, time.monotonic()
            block = b"a" * (1 << 20)
            try:
                c.settimeout(15)
                while sent < (100 << 20):
                    c.sendall(block)
                    sent += len(block)
            except OSError:
                pass
            c.settimeout(15)
            try:
                resp = c.recv(4096)
            except OSError:
                resp = b""
            c.close()
            record("CL 100 MiB, body sent", resp[9:12] in (b"413", b"") and sent <= self.CAP +
                   (16 << 20), f"{sent >> 20} MiB accepted before the answer "
                   f"{resp[:12]!r} ({time.monotonic() - t:.1f} s)")

            # 3. An endless chunked body: closed (or 413) once the cap is reached.
            c = socket.create_connection(("127.0.0.1", s.port), timeout=15)
            c.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n")
            chunk = b"%x\r\n" % 65536 + b"a" * 65536 + b"\r\n"
            sent, t = 0, time.monotonic()
            limit = scaled(64, 256) << 20
            try:
                while sent < limit and time.monotonic() - t < 30:
                    c.sendall(chunk)
                    sent += 65536
            except OSError:
                pass
            c.close()
            # Loopback socket buffers hold several MiB; allow the cap + 16 MiB in flight.
            record("endless chunked", sent <= self.CAP + (16 << 20),
                   f"{sent >> 20} MiB sent before the server closed (gave up at {limit >> 20})")

            # 4-5. Negative and overlong hex chunk sizes: 400 or a close, quickly.
            for name, body in (("negative chunk size", b"-5\r\nhello\r\n0\r\n\r\n"),
                               ("overlong chunk size", b"f" * 40 + b"\r\nhello\r\n0\r\n\r\n")):
                out, first, closed = read_response(
                    s.port, head + b"Transfer-Encoding: chunked\r\n\r\n" + body, timeout=15)
                st = out[9:12].decode(errors="replace")
                quick = first is not None and first < 1.0 or (closed and not out)
                record(name, st in ("400", "411", "413") and quick or (not out and closed),
                       f"status {st or 'close'} after "
                       f"{first if first is None else round(first, 2)} s")

            # 6. A gzip bomb: 415, never inflated.
            bomb = gzip_bomb(scaled(1024, 1024))
            out, first, _ = read_response(
                s.port, head + b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" %
                len(bomb) + bomb, timeout=15)
            st = out[9:12].decode(errors="replace")
            record(f"gzip bomb ({len(bomb) >> 10} KiB -> 1 GiB)", st == "415",
                   f"status {st} after {first if first is None else round(first, 2)} s")

            # 7. Transfer-Encoding and Content-Length: 400.
            out, first, _ = read_response(
                s.port, head + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"0\r\n\r\n", timeout=15)
            st = out[9:12].decode(errors="replace")
            record("TE + CL", st == "400", f"status {st}")

            peak = sampler.stop()
            hwm = proc_status(s.proc.pid)["VmHWM"]
            alive = s.request("GET", "/health")[0]
            m = settle(s, fds0, FD_TOLERANCE, timeout=15)
            log(f"RESULT L7: " + "; ".join(results) + f"; RSS baseline {rss0 / 2**20:.1f} MiB, "
                f"sampled peak {peak / 2**20:.1f} MiB, VmHWM {hwm / 2**20:.1f} MiB (bound "
                f"{(rss0 + 2 * self.CAP) / 2**20:.1f}); /health {alive}; fd delta "
                f"{m['process_open_fds'] - fds0:+.0f}")
            self.assertEqual(alive, 200)
            self.assertLessEqual(max(peak, hwm), rss0 + 2 * self.CAP,
                                 "RSS went over the baseline + 2 x the body cap")
            self.assertEqual(failures, [])
        finally:
            stop_clean(self, s)


# --- L8 ------------------------------------------------------------------------------------------

class L8ProtocolFuzz(unittest.TestCase):
    """10,000 (CI: 1,500) mutated requests over 4 connections at a time, from our mutator seeded
    with the R35-R46 catalogue and valid requests. Every answer is a well-formed 2xx/4xx response
    or a close; the server stays alive; afterwards a reduced L1 passes and nothing is left held."""

    def test_l8_protocol_fuzz(self):
        mml = 128
        s = MlaServer(BINARY, MODEL, "--max-num-seqs", "4", "--max-model-len", str(mml),
                      "--max-body-bytes", "65536", "--kv-cache-bytes", KV_BYTES)
        try:
            M = s.model_id
            seeds = []
            for b in bad_requests(M, mml):
                seeds.append(b.raw if b.raw is not None else (b.method, b.path, b.body,
                                                                 b.headers))
            msgs = [{"role": "user", "content": "hello there"}]
            seeds += [
                ("POST", "/v1/completions", {"model": M, "prompt": "hi", "max_tokens": 4}, {}),
                ("POST", "/v1/completions", {"model": M, "prompt": [5, 6, 7], "max_tokens": 3,
                                             "stream": True, "logprobs": 2}, {}),
                ("POST", "/v1/chat/completions", {"model": M, "messages": msgs, "max_tokens": 4,
                                                  "stream": True, "stop": ["a"]}, {}),
                ("POST", "/v1/chat/completions", {"model": M, "messages": msgs, "max_tokens": 3,
                                                  "logprobs": True, "top_logprobs": 2,
                                                  "logit_bias": {"5": 3}}, {}),
                ("POST", "/tokenize", {"prompt": "hello"}, {}),
                ("POST", "/tokenize", {"messages": msgs}, {}),
                ("POST", "/detokenize", {"tokens": [5, 6, 7]}, {}),
                ("GET", "/v1/models", None, {}), ("GET", "/metrics", None, {}),
                ("GET", "/health", None, {}), ("GET", "/", None, {}),
            ]
            fds0 = baseline_fds(s)
            # Fixed cases first (found by this fuzz): a HEAD request the parser refuses must get
            # a response without a body.
            fixed = [b"HEAD /v1/completions HTTP/1.1\nHost: x\nContent-Length: 5\n"
                     b"Connection: close\nX-Dup: 0\n\nhello"]
            fixed_bad = []
            for data in fixed:
                out, how = fuzz_exchange(s.port, data)
                try:
                    parse_responses(out, cut_short=how in ("reset", "answer"), head_request=True)
                except AssertionError as e:
                    fixed_bad.append((str(e)[:200], data[:100]))
            total = scaled(1500, 10000)
            lock = threading.Lock()
            stats = {"n": 0, "statuses": {}, "closes": 0, "bad": [], "stalls": [], "how": {}}

            def worker(k):
                mut = Mutator(seeds, seed=8000 + k)
                while True:
                    with lock:
                        if stats["n"] >= total:
                            return
                        stats["n"] += 1
                    data, _ = mut.next()
                    try:
                        out, how = fuzz_exchange(s.port, data)
                    except OSError as e:
                        out, how = b"", type(e).__name__
                    except Exception as e:  # the client's own parsing: report, keep going
                        with lock:
                            stats["bad"].append((f"client error {e!r}", data[:200]))
                        continue
                    with lock:
                        stats["how"][how] = stats["how"].get(how, 0) + 1
                        if how == "stall":
                            stats["stalls"].append((data[:200], out[:200]))
                            continue
                        try:
                            sts = parse_responses(out, cut_short=how in ("reset", "answer"),
                                                  head_request=data.startswith(b"HEAD "))
                        except AssertionError as e:
                            stats["bad"].append((str(e), data[:200]))
                            continue
                        if not sts:
                            stats["closes"] += 1
                        for st in sts:
                            stats["statuses"][st] = stats["statuses"].get(st, 0) + 1
                            if not (200 <= st < 300 or 400 <= st < 500):
                                stats["bad"].append((f"status {st}", data[:300]))

            t0 = time.monotonic()
            ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            wall = time.monotonic() - t0
            alive = s.proc.poll() is None and s.request("GET", "/health")[0] == 200
            m = settle(s, fds0, FD_TOLERANCE, timeout=15)
            specs = make_specs(12, seed=8, prompt_len=(16, 60), max_tokens=(8, 40))
            base = baseline(s, specs)
            res = run_load(s, specs, base, threads=8, per_thread=scaled(6, 25), seed=8)
            m = settle(s, fds0, FD_TOLERANCE, timeout=15)
            log(f"RESULT L8: {total} mutated requests in {wall:.1f} s over 4 connections: "
                f"statuses {dict(sorted(stats['statuses'].items()))}, {stats['closes']} closes "
                f"without an answer (ends: {stats['how']}), {len(stats['bad'])} malformed or 5xx, "
                f"{len(stats['stalls'])} stalls; fixed cases wrong {len(fixed_bad)}; server alive "
                f"{alive}; then L1 reduced: "
                f"{res.summary()}; blocks used {m['vllm:kv_cache_blocks_used']:.0f}, fd delta "
                f"{m['process_open_fds'] - fds0:+.0f}")
            for e in fixed_bad + stats["bad"][:5] + stats["stalls"][:5]:
                log("   ", e)
            self.assertTrue(alive)
            self.assertEqual(fixed_bad, [])
            self.assertEqual(stats["bad"], [])
            self.assertEqual(stats["stalls"], [])
            self.assertEqual(res.statuses, {200: res.count})
            self.assertEqual(res.mismatches, [])
        finally:
            stop_clean(self, s)


# --- L10 -----------------------------------------------------------------------------------------

def stream_reader(port, spec, model_id, out, idx, first_chunk):
    """Streams one request with a raw socket; out[idx] = (bytes, closed cleanly)."""
    c = socket.create_connection(("127.0.0.1", port), timeout=120)
    buf = b""
    try:
        c.sendall(http_bytes("POST", spec.path, spec.body(model_id)))
        while True:
            b = c.recv(65536)
            if not b:
                break
            buf += b
            if b"data: " in buf:
                first_chunk[idx].set()
    except OSError as e:
        buf += f"<{type(e).__name__}>".encode()
    finally:
        c.close()
        first_chunk[idx].set()
        out[idx] = buf


def dechunk(raw):
    """Status and body of a chunked HTTP/1.1 response."""
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head[9:12]) if head.startswith(b"HTTP/1.1 ") else None
    out = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        try:
            n = int(size_line.split(b";")[0], 16)
        except ValueError:
            break
        if n == 0:
            break
        out += rest[:n]
        body = rest[n + 2:]
    return status, out


def try_new_connection(port):
    """What a new client gets during a drain: 'refused', 'reset', or the status of GET
    /v1/models; and how long it took."""
    t = time.monotonic()
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=2)
    except ConnectionRefusedError:
        return "refused", time.monotonic() - t
    except OSError as e:
        return type(e).__name__, time.monotonic() - t
    try:
        c.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        b = c.recv(64)
        return (b[9:12].decode() if b else "closed"), time.monotonic() - t
    except ConnectionResetError:
        return "reset", time.monotonic() - t
    except socket.timeout:
        return "timeout", time.monotonic() - t
    except OSError as e:
        return type(e).__name__, time.monotonic() - t
    finally:
        c.close()


class L10GracefulShutdown(unittest.TestCase):
    """8 long streams, then SIGTERM. With a 10 s drain: new connections are refused or get 503 at
    once (< 0.5 s), the streams finish (finish_reason length, [DONE], baseline text) and the exit
    code is 0. With no drain: every stream ends with one error event and [DONE]; exit 0 within a
    few seconds. No sanitizer report in either case."""

    def run_case(self, drain, max_tokens):
        s = MlaServer(BINARY, MODEL, "--max-num-seqs", "8", "--shutdown-timeout", str(drain),
                      "--kv-cache-bytes", KV_BYTES, "--max-model-len", "32768")
        rng = random.Random(10)
        specs = [Spec(i, "completions" if i % 2 else "chat",
                      [rng.randrange(3, 300) for _ in range(32)] if i % 2 else "tell me more",
                      max_tokens, True) for i in range(8)]
        base = baseline(s, specs) if drain else {}
        out, first = [None] * 8, [threading.Event() for _ in range(8)]
        ts = [threading.Thread(target=stream_reader, args=(s.port, specs[i], s.model_id, out, i,
                                                           first)) for i in range(8)]
        for t in ts:
            t.start()
        for e in first:
            e.wait(60)
        deadline = time.monotonic() + 10
        while s.metrics()["vllm:http_requests_in_flight"] < 8 and time.monotonic() < deadline:
            time.sleep(0.01)
        in_flight = s.metrics()["vllm:http_requests_in_flight"]
        t_term = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        # New clients during the drain.
        while not any("draining" in l for l in s.log) and time.monotonic() - t_term < 5:
            time.sleep(0.005)
        probes = []
        while s.proc.poll() is None and len(probes) < 20:
            probes.append(try_new_connection(s.port))
            time.sleep(0.05)
        try:
            rc = s.proc.wait(timeout=drain + 30)
        except subprocess.TimeoutExpired:
            s.proc.kill()
            rc = "hung"
        exit_s = time.monotonic() - t_term
        for t in ts:
            t.join(30)
        s._reader.join(timeout=5)
        log_text = "".join(s.log)
        endings = []
        for i, raw in enumerate(out):
            status, body = dechunk(raw or b"")
            try:
                events = sse_events(body)
            except AssertionError as e:
                endings.append(("malformed", str(e)[:80]))
                continue
            last = json.loads(events[-2]) if len(events) >= 2 else {}
            if events[-1] != "[DONE]":
                endings.append(("no [DONE]", events[-1][:80]))
            elif "error" in last:
                endings.append(("error event", last["error"].get("type")))
            else:
                fin = last["choices"][0]["finish_reason"]
                text = parse_output(specs[i], True, body)
                same = greedy_equal(specs[i], base.get(i), text) if base else None
                endings.append((fin, same))
        return dict(rc=rc, exit_s=exit_s, probes=probes, endings=endings, log=log_text,
                    in_flight=in_flight)

    def test_l10_graceful_shutdown(self):
        # Long enough to be running at SIGTERM, short enough to finish within the 10 s drain
        # (8 x 1200 tokens take about 3 s here).
        drained = self.run_case(10, scaled(1200, 1600))
        nodrain = self.run_case(0, 30000)
        for name, r in (("drain 10 s", drained), ("drain 0", nodrain)):
            kinds = {}
            for e in r["endings"]:
                kinds[str(e)] = kinds.get(str(e), 0) + 1
            log(f"RESULT L10 {name}: {r['in_flight']:.0f} streams in flight at SIGTERM; exit "
                f"{r['rc']} after {r['exit_s']:.2f} s; streams ended {kinds}; new clients "
                f"during the drain: {sorted(set(p for p, _ in r['probes']))}, slowest "
                f"{max((d for _, d in r['probes']), default=0) * 1000:.0f} ms")
        for r in (drained, nodrain):
            for bad in ("LeakSanitizer", "AddressSanitizer", "runtime error:",
                        "terminate called"):
                self.assertNotIn(bad, r["log"])
            self.assertEqual(r["rc"], 0, r["log"][-1500:])
            self.assertEqual(r["in_flight"], 8)
            for p, d in r["probes"]:
                self.assertIn(p, ("refused", "reset", "closed", "503"))
                self.assertLess(d, 0.5)
        # Shutdown itself: every drained stream ran to its length and [DONE].
        self.assertEqual([e[0] for e in drained["endings"]], ["length"] * 8, drained["endings"])
        # Nothing lost: the drained streams' greedy text equals each request alone (fails today
        # for the engine's batch-dependent numerics, the same finding as L1 at full size).
        self.assertEqual([e[1] for e in drained["endings"]], [True] * 8,
                         "drained streams differ from their single-request baseline")
        self.assertLess(drained["exit_s"], 10 + 2)
        self.assertEqual(nodrain["endings"], [("error event", "service_unavailable")] * 8)
        self.assertLess(nodrain["exit_s"], 3)


# --- L11 -----------------------------------------------------------------------------------------

def limited(as_bytes, stack_bytes=None):
    def preexec():
        resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if stack_bytes:
            resource.setrlimit(resource.RLIMIT_STACK, (stack_bytes, stack_bytes))
    return preexec


def start_limited(model, args, as_bytes, stack_bytes=None, timeout=30):
    """Starts `mla serve` under the limits; returns (proc, port or None, stderr lines so far)."""
    p = subprocess.Popen([BINARY, "serve", "-m", model, "--port", "0", *args],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         preexec_fn=limited(as_bytes, stack_bytes))
    lines, port = [], None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
        if line.startswith("ready:"):
            return p, port, lines
    p.wait(timeout=10)
    return p, None, lines


class L11MemoryCeiling(unittest.TestCase):
    """Under RLIMIT_AS (`ulimit -v`) = weights + KV + 512 MiB: the server starts; over-large
    requests get 400/503 and it is never killed; a model bigger than the limit, or a KV cache
    bigger than it, fails with one clean error line (exit != 0, no signal).

    Case (a) uses the process defaults (8 MiB thread stacks). Cases (b)-(d) also set RLIMIT_STACK
    to 1 MiB, which sizes glibc's thread stacks, so that they test the request and load paths
    even where (a) fails because of the server's thread count (see docs/RELIABILITY.md)."""

    def test_l11_memory_ceiling(self):
        kv = 64 << 20
        limit = model_bytes(MODEL) + kv + (512 << 20)
        args = ["--kv-cache-bytes", str(kv), "--max-num-seqs", "4", "--max-queue", "16",
                "--max-model-len", "4096"]
        findings = []

        # (a) defaults.
        p, port, lines = start_limited(MODEL, args, limit)
        started_a = port is not None and p.poll() is None
        if started_a:
            # (SIGTERM at once after `ready:` under the limit sometimes kills the process by the
            # signal instead of draining: a separate finding, see docs/RELIABILITY.md.)
            time.sleep(0.5)
            health_a = exchange_one(port, http_bytes("GET", "/health"))[9:12]
            started_a = started_a and health_a == b"200"
            p.send_signal(signal.SIGTERM)
            rc_a = p.wait(timeout=30)
        else:
            rc_a = p.returncode
        findings.append(f"(a) limit {limit >> 20} MiB, default stacks: "
                        f"{'started' if started_a else 'did not start'}, exit {rc_a}" +
                        ("" if started_a else f" ({''.join(lines[-2:]).strip()[:160]})"))

        # (b) the same limit with 1 MiB thread stacks: oversized requests.
        p, port, lines = start_limited(MODEL, args, limit, stack_bytes=1 << 20)
        self.assertIsNotNone(port, "".join(lines))
        drain = threading.Thread(target=lambda: [lines.append(l) for l in p.stderr], daemon=True)
        drain.start()
        try:
            self.assertIsNone(p.poll(), "".join(lines))
            model_id = json.loads(exchange_one(port, http_bytes("GET", "/v1/models")).partition(
                b"\r\n\r\n")[2])["data"][0]["id"]
            sampler = RssSampler(p.pid)
            checks = []
            # A normal request first: the server serves under the limit.
            out, _, _ = read_response(port, http_bytes("POST", "/v1/completions", {
                "model": model_id, "prompt": [5] * 16, "max_tokens": 4}), timeout=20)
            normal = out[9:12].decode(errors="replace") or "no answer in 20 s"
            big_text = "word " * ((4 << 20) // 5 - 100)  # just under the 4 MiB body cap
            # (name, path, body, statuses allowed). Refused: what cannot fit the context. The 16
            # prompts of 4000 tokens each fit it, so the engine may also serve them one after
            # another through its 64 MiB cache (200); what matters is an answer within the limit.
            refused = ("400", "413", "503")
            for name, path, body, allowed in [
                ("prompt 4 MiB of text", "/v1/completions",
                 {"model": model_id, "prompt": big_text, "max_tokens": 1}, refused),
                ("prompt over the context", "/v1/completions",
                 {"model": model_id, "prompt": [5] * 5000, "max_tokens": 1}, refused),
                ("max_tokens over the context", "/v1/completions",
                 {"model": model_id, "prompt": [5] * 10, "max_tokens": 10 ** 9}, refused),
                ("16 prompts x 4000 tokens", "/v1/completions",
                 {"model": model_id, "prompt": [[5] * 4000] * 16, "max_tokens": 1},
                 refused + ("200",)),
                ("chat 4 MiB", "/v1/chat/completions",
                 {"model": model_id, "messages": [{"role": "user", "content": big_text}]},
                 refused),
            ]:
                out, _, _ = read_response(port, http_bytes("POST", path, body), timeout=20)
                checks.append((name, out[9:12].decode(errors="replace") or "no answer in 20 s",
                               allowed))
            # Many full-context requests at once: admitted or 429, all answered.
            outs = [None] * 24

            def full(i):
                outs[i] = read_response(port, http_bytes("POST", "/v1/completions", {
                    "model": model_id, "prompt": [7 + i] * 3000, "max_tokens": 8}),
                    timeout=30)[0][9:12].decode(errors="replace") or "no answer in 30 s"

            ts = [threading.Thread(target=full, args=(i,)) for i in range(24)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            peak = sampler.stop()
            alive = p.poll() is None and exchange_one(
                port, http_bytes("GET", "/health"))[9:12] == b"200"
            p.send_signal(signal.SIGTERM)
            rc_b = p.wait(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        counts = {}
        for st in outs:
            counts[st] = counts.get(st, 0) + 1
        oversized = [(n, st) for n, st, _ in checks]
        findings.append(f"(b) 1 MiB stacks: a 16-token request {normal}; oversized {oversized}; "
                        f"24 x 3000-token requests "
                        f"{counts}; RSS peak {peak / 2**20:.0f} MiB; alive {alive}; exit {rc_b}")

        # (c) a model bigger than the limit, (d) a KV cache bigger than the limit.
        tmp = tempfile.mkdtemp(prefix="mla-l11-")
        try:
            big = make_big_model(BINARY, tmp, limit + (256 << 20))
            clean = {}
            for name, model, extra in (("model", big, args),
                                       ("kv cache", MODEL, ["--kv-cache-bytes",
                                                            str(limit + (256 << 20))])):
                t = time.monotonic()
                p, port, lines = start_limited(model, extra, limit, stack_bytes=1 << 20)
                if p.poll() is None:
                    p.kill()
                    p.wait()
                    clean[name] = (None, "started", 0)
                    continue
                rest = p.stderr.read()
                lines += rest.splitlines(True)
                errs = [l.strip() for l in lines if l.startswith("error:")]
                clean[name] = (p.returncode, errs[0][:160] if errs else "".join(lines)[-200:],
                               len(errs), time.monotonic() - t)
            findings.append(f"(c) model of {model_bytes(big) >> 20} MiB: {clean['model']}")
            findings.append(f"(d) KV cache of {(limit + (256 << 20)) >> 20} MiB: "
                            f"{clean['kv cache']}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        log("RESULT L11: " + " | ".join(findings))
        self.assertEqual(normal, "200", "a normal request under the limit")
        for name, st, allowed in checks:
            self.assertIn(st, allowed, f"{name}: {st}")
        self.assertTrue(set(counts) <= {"200", "429", "503"}, counts)
        self.assertTrue(alive)
        self.assertEqual(rc_b, 0)
        for name, r in clean.items():
            self.assertIsNotNone(r[0], f"{name}: the server started under the limit")
            self.assertGreater(r[0], 0, f"{name}: killed by signal {-r[0]}: {r[1]}")
            self.assertEqual(r[2], 1, f"{name}: expected one error line: {r[1]}")
        self.assertTrue(started_a, findings[0])
        self.assertEqual(rc_a, 0, findings[0])


# --- L12 -----------------------------------------------------------------------------------------

class L12BadModelAtStartup(unittest.TestCase):
    """Every R1-R20 file class, generated from a `mla make-tiny --family v3` model (FP8, two shards
    with an index): `mla serve` exits != 0 within 1 s (from the start of the process), prints
    exactly one `error:` line naming the file, field or value, and is not killed by a signal (no
    crash, no core dump)."""

    def test_l12_bad_model_at_startup(self):
        tmp = tempfile.mkdtemp(prefix="mla-l12-")
        try:
            pristine = os.path.join(tmp, "pristine")
            subprocess.run([BINARY, "make-tiny", "--family", "v3", "--out", pristine],
                           check=True, capture_output=True)
            # The pristine model serves (the control).
            t = time.monotonic()
            s = MlaServer(BINARY, pristine, "--kv-cache-bytes", str(8 << 20))
            ready_s = time.monotonic() - t
            self.assertEqual(s.stop(), 0)
            rows, failures = [], []
            for i, (name, family, fn, words) in enumerate(shard_cases() + config_cases()):
                d = os.path.join(tmp, f"case{i}")
                shutil.copytree(pristine, d)
                fn(d)
                t = time.monotonic()
                p = subprocess.Popen([BINARY, "serve", "-m", d, "--port", "0",
                                      "--kv-cache-bytes", str(8 << 20)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     cwd=tmp, preexec_fn=lambda: resource.setrlimit(
                                         resource.RLIMIT_CORE, (0, 0)))
                try:
                    _, err = p.communicate(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    _, err = p.communicate()
                    err += "\n<still running after 15 s>"
                dt = time.monotonic() - t
                lines = [l for l in err.splitlines() if l.strip()]
                errs = [l for l in lines if l.startswith("error:")]
                other = [l for l in lines if not l.startswith(("error:", "listening on"))]
                named = bool(errs) and any(w in errs[0] for w in words)
                ok = (p.returncode is not None and p.returncode > 0 and len(errs) == 1 and
                      not other and dt < 1.0 and named)
                rows.append((name, p.returncode, round(dt, 2), errs[0][:150] if errs else
                             "; ".join(lines)[-150:]))
                if not ok:
                    failures.append(f"{name}: exit {p.returncode} after {dt:.2f} s, "
                                    f"{len(errs)} error lines{'' if named else ' (not naming ' + '/'.join(words) + ')'}"
                                    f", other output {other[:2]}: {errs[:1] or lines[-2:]}")
            times = [r[2] for r in rows]
            log(f"RESULT L12: {len(rows)} broken checkpoints; {len(rows) - len(failures)} exited "
                f"!= 0 with one clear error line within 1 s; exit times median "
                f"{percentile(times, 50):.2f} s, max {max(times):.2f} s (the pristine copy is "
                f"ready in {ready_s:.2f} s)")
            for r in rows:
                log(f"    {r[0]}: exit {r[1]}, {r[2]} s: {r[3]}")
            for f in failures:
                log("  FAIL", f)
            self.assertEqual(failures, [])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if FULL:
        log("MLA_LOAD_FULL=1: the full sizes of docs/RELIABILITY.md §Checklist")
    unittest.main(argv=[sys.argv[0]] + sys.argv[3:], verbosity=2)
