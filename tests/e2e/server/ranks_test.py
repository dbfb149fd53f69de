#!/usr/bin/env python3
"""A model split over 2 ranks (mpirun on the loopback, one thread per rank; docs/ARCHITECTURE.md
§Ranks), end to end:
  - `mla serve` across 2 ranks answers the official `openai` client with the one-rank server's
    tokens: greedy completions and streamed chat, n = 2 (forks whose copy-on-write copies the
    leader must repeat in the follower's cache), a prefix-cache hit, concurrent requests;
  - chunked prefill, preemption, a dropped stream and prefix-cache hits in every KV format give
    the one-rank server's greedy tokens;
  - a rank killed mid-stream, or a follower sent SIGTERM, ends the job: the stream ends, the
    leader says the launcher stopped it, and mpirun exits non-zero, no hang;
  - a rank count that does not divide the heads and experts, and a corrupt shard on one rank,
    are one clear error on every rank naming the cause and the rank;
  - `mla generate` and `mla bench model` across ranks, on the checkpoint and on a Q8_0 GGUF of it.
The logits' agreement with the one-rank run, within the bound of the arithmetic, is checked per
family by tests/e2e/model_oracle.py.

Usage: ranks_test.py MLA_BINARY MODEL_DIR
(exit 77: skipped where mpirun or the openai package is missing, or mla was built without MPI)
"""
import concurrent.futures
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from mla_server import MlaServer, find_binary_and_model  # noqa: E402
from mpi_launch import built_without_mpi, mpirun  # noqa: E402

try:
    import openai
except ImportError:
    print("skipped: the openai package is not installed")
    sys.exit(77)

BINARY, MODEL = find_binary_and_model(sys.argv)
TWO = mpirun(2)
if TWO is None:
    print("skipped: mpirun is not installed (Debian: openmpi-bin)")
    sys.exit(77)
_probe = subprocess.run([*TWO[0], BINARY, "generate", "-m", MODEL, "--tokens", "1,2", "-n", "1",
                         "--threads", "1"], capture_output=True, text=True, env=TWO[1], timeout=120)
if built_without_mpi(_probe.stderr):
    print("skipped: this mla was built without MPI")
    sys.exit(77)

# Small pages, so that the prompts below fill whole pages (prefix-cache hits) and end inside one
# (n = 2 forks share it until each writes: a copy-on-write copy).
SERVE_ARGS = ("--threads", "1", "--page-size", "16", "--max-num-seqs", "8")
# Logprobs of the two runs: both are FP32 evaluations of the same model in different summation
# orders (o_proj, the FFN and the experts summed per rank, then across ranks). model_oracle.py
# bounds every logit of both within 2x its FP32 bound of the exact value, at most 3.5e-4 on the
# tiny checkpoints; a logprob (logit − logsumexp) moves by at most twice a logit's change.
LOGPROB_TOL = 2 * 3.5e-4 + 1e-6

PROMPTS = [
    "In the beginning God created the heaven and the earth. " * 3,
    "And the earth was without form, and void; and darkness was upon the face of the deep.",
    "Let there be light: and there was light.",
    "The quick brown fox jumps over the lazy dog. " * 2,
]


def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0, timeout=120)


def complete(server, prompt, **kw):
    r = client(server).completions.create(model=server.model_id, prompt=prompt, temperature=0,
                                          max_tokens=kw.pop("max_tokens", 24), logprobs=1, **kw)
    return [(c.text, c.logprobs.token_logprobs) for c in r.choices]


def chat_stream(server, text):
    stream = client(server).chat.completions.create(
        model=server.model_id, messages=[{"role": "user", "content": text}], temperature=0,
        max_tokens=24, stream=True)
    return "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)


def stop(server):
    """SIGTERM to the server's rank 0 (the leader drains, releases the follower, every rank and
    mpirun exit 0; mpirun itself signalled ends the ranks and exits 1: docs/SERVING.md §Across
    ranks); the exit code."""
    if server.proc.poll() is None and server.launched:
        os.kill(rank_pid(server.proc.pid, 0), signal.SIGTERM)
        try:
            server.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass  # server.stop signals mpirun and fails
    return server.stop(timeout=60)


class ServeAcrossRanks(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.one = MlaServer(BINARY, MODEL, *SERVE_ARGS)
        cls.two = MlaServer(BINARY, MODEL, *SERVE_ARGS, launcher=TWO)

    @classmethod
    def tearDownClass(cls):
        cls.one.stop()
        assert stop(cls.two) == 0, "mpirun mla serve did not exit 0: " + "".join(cls.two.log[-5:])

    def assert_same(self, a, b, what):
        self.assertEqual(len(a), len(b), what)
        for (ta, la), (tb, lb) in zip(a, b):
            self.assertEqual(ta, tb, what)
            worst = max(abs(x - y) for x, y in zip(la, lb))
            self.assertLessEqual(worst, LOGPROB_TOL, f"{what}: logprobs differ by {worst}")

    def test_completions_equal_one_rank(self):
        for p in PROMPTS:
            self.assert_same(complete(self.two, p), complete(self.one, p), p[:30])

    def test_streamed_chat_equal_one_rank(self):
        self.assertEqual(chat_stream(self.two, PROMPTS[1]), chat_stream(self.one, PROMPTS[1]))

    def test_forks_and_prefix_hits(self):
        # n = 2 greedy: two identical choices from forks of one prompt; then the same prompt
        # again, whose full pages now come from the prefix cache.
        for _ in range(2):
            got, want = complete(self.two, PROMPTS[0], n=2), complete(self.one, PROMPTS[0], n=2)
            self.assert_same(got, want, "n=2")
            self.assertEqual(got[0][0], got[1][0])

    def test_concurrent_requests(self):
        want = {p: complete(self.one, p) for p in PROMPTS}
        with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as ex:
            got = dict(zip(PROMPTS, ex.map(lambda p: complete(self.two, p), PROMPTS)))
        for p in PROMPTS:
            self.assert_same(got[p], want[p], "concurrent " + p[:30])


# Every KV format (`mla serve --kv-dtype`) with chunked prefill (32-token steps; the prompts below
# are 42-48 tokens), a cache of 10 pages of 16 tokens that the concurrent requests outgrow (each
# needs 3 pages to start and 6 to finish), so the scheduler preempts and recomputes, a stream
# dropped mid-way (cancellation) and a repeated prompt (prefix-cache hits). Bytes per page (16
# tokens, 4 layers): the format's record of the tiny checkpoint's 48 + 8 latent values.
FEATURE_PAGES = 10
KV_PAGE_BYTES = {"bf16": 7168, "fp8_e4m3": 5248, "int8": 5248, "nvfp4": 3072}
FEATURE_PROMPTS = [
    "And the earth was without form, and void; and darkness was upon the deep.",
    "And God called the light Day, and the darkness he called Night. And the",
    "And God made the firmament, and divided the waters which were under it",
    "And the evening and the morning were the third day. And God said, Let",
]


class FeaturesAcrossRanks(unittest.TestCase):
    """Chunked prefill, preemption, cancellation and the prefix cache in each KV format on 2 ranks
    give the one-rank server's greedy tokens. The comparison is of tokens: a latent value at a
    rounding boundary of the format may round to the neighbouring code in one run and not the
    other (the two runs' latents differ in FP32 rounding), which moves a logprob by up to ~2e-3
    here, past LOGPROB_TOL. With FP32 products the replies do not depend on the batches the
    scheduler formed, so the two servers' different preemptions do not change them."""

    def features(self, server):
        clients = [client(server) for _ in range(len(FEATURE_PROMPTS) + 1)]
        start = threading.Barrier(len(clients))  # every request at once: the cache overflows

        def one(c, p, wait=True):
            if wait:
                start.wait()
            r = c.completions.create(model=server.model_id, prompt=p, temperature=0,
                                     max_tokens=40, extra_body={"ignore_eos": True})
            return r.choices[0].text, r.usage.prompt_tokens

        def dropped(c):
            start.wait()
            stream = c.completions.create(model=server.model_id, prompt=FEATURE_PROMPTS[1],
                                          max_tokens=100, stream=True,
                                          extra_body={"ignore_eos": True})
            for i, _ in enumerate(stream):
                if i == 3:
                    break
            stream.close()  # the server sees the hang-up and cancels the request

        with concurrent.futures.ThreadPoolExecutor(len(clients)) as ex:
            drop = ex.submit(dropped, clients[-1])
            got = list(ex.map(one, clients, FEATURE_PROMPTS))
            drop.result()
        server.wait_idle(timeout=30)  # the cancelled request's pages are free on every rank
        # The first prompt again, alone: its full pages come from the prefix cache.
        got.append(one(clients[0], FEATURE_PROMPTS[0], wait=False))
        return got, server.metrics()

    def test_features_in_every_kv_format(self):
        for kv, page_bytes in KV_PAGE_BYTES.items():
            with self.subTest(kv=kv):
                args = (*SERVE_ARGS, "--max-num-batched-tokens", "32", "--kv-dtype", kv,
                        "--kv-cache-bytes", str(FEATURE_PAGES * page_bytes))
                servers = [MlaServer(BINARY, MODEL, *args)]
                try:
                    servers.append(MlaServer(BINARY, MODEL, *args, launcher=TWO))
                    (want, m1), (got, m2) = (self.features(s) for s in servers)
                finally:
                    codes = [stop(s) for s in servers]
                self.assertEqual(codes, [0, 0], kv)
                for m in (m1, m2):
                    self.assertEqual(m["vllm:kv_cache_blocks_total"], FEATURE_PAGES, kv)
                    self.assertGreater(m["vllm:num_preemptions_total"], 0, kv)
                    self.assertGreater(m["vllm:prefix_cache_hits_total"], 0, kv)
                    self.assertEqual(m['vllm:request_success_total{finished_reason="abort"}'], 1,
                                     kv)
                self.assertTrue(all(n > 32 for _, n in want), kv)  # each prompt took 2 chunks
                self.assertEqual([t for t, _ in got], [t for t, _ in want], kv)


def rank_pid(launcher_pid, rank):
    """The pid of rank `rank` among mpirun's children (from its OMPI_COMM_WORLD_RANK)."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if ppid == launcher_pid and f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            return int(d)
    return None


class Faults(unittest.TestCase):
    def test_rank_killed_mid_stream_ends_the_job(self):
        server = MlaServer(BINARY, MODEL, *SERVE_ARGS, launcher=TWO)
        try:
            stream = client(server).completions.create(
                model=server.model_id, prompt=PROMPTS[2], max_tokens=30000, stream=True,
                extra_body={"ignore_eos": True})
            it = iter(stream)
            for _ in range(5):
                next(it)
            follower = rank_pid(server.proc.pid, 1)
            self.assertIsNotNone(follower, "rank 1's process not found")
            os.kill(follower, signal.SIGKILL)
            t0 = time.time()
            try:
                for _ in it:  # must end (closed or an error), not hang
                    if time.time() - t0 > 60:
                        self.fail("the stream went on after rank 1 died")
            except (openai.APIError, ConnectionError):
                pass
            code = server.proc.wait(timeout=60)
            self.assertNotEqual(code, 0)
            self.assertLess(time.time() - t0, 60)
            self.assert_stopped_by_launcher(server)
        finally:
            if server.proc.poll() is None:
                server.proc.kill()
                server.proc.wait()

    def assert_stopped_by_launcher(self, server):
        # mpirun, seeing a rank end, signals the others; the leader says so instead of reading
        # like an operator's shutdown (docs/SERVING.md §Across ranks).
        server._reader.join(timeout=10)
        log = "".join(server.log)
        self.assertRegex(log, r"stopped by the launcher \(signal 15 from pid \d+, this rank's "
                              r"parent\): another rank may have failed; see mpirun's report", log)

    def test_follower_sigterm_ends_the_job(self):
        # SIGTERM to a follower: it ends (the default action; only the leader has a stop
        # handler), and mpirun ends the job, no hang.
        server = MlaServer(BINARY, MODEL, *SERVE_ARGS, launcher=TWO)
        try:
            follower = rank_pid(server.proc.pid, 1)
            self.assertIsNotNone(follower, "rank 1's process not found")
            os.kill(follower, signal.SIGTERM)
            code = server.proc.wait(timeout=60)
            self.assertNotEqual(code, 0)
            self.assert_stopped_by_launcher(server)
        finally:
            if server.proc.poll() is None:
                server.proc.kill()
                server.proc.wait()

    def test_leader_failing_before_the_load_ends_every_rank(self):
        # The leader's port is taken while the follower already waits inside the load: the job
        # ends with the leader's error instead of waiting for ever.
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen(1)
            port = taken.getsockname()[1]
            prefix, env = TWO
            t0 = time.time()
            r = subprocess.run([*prefix, BINARY, "serve", "-m", MODEL, "--port", str(port),
                                "--threads", "1"], capture_output=True, text=True, env=env,
                               timeout=120)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(str(port), r.stderr)
        self.assertLess(time.time() - t0, 60)

    def test_bad_rank_count_is_named(self):
        prefix, env = mpirun(3)
        r = subprocess.run([*prefix, BINARY, "generate", "-m", MODEL, "--tokens", "1,2", "-n", "1",
                            "--threads", "1"], capture_output=True, text=True, env=env, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("cannot be split over 3 ranks", r.stderr)
        self.assertIn("4 attention heads and 8 routed experts", r.stderr)

    def test_corrupt_shard_on_one_rank_is_named(self):
        with tempfile.TemporaryDirectory(prefix="mla-ranks-") as tmp:
            bad = os.path.join(tmp, "bad")
            shutil.copytree(MODEL, bad)
            shard = sorted(f for f in os.listdir(bad) if f.endswith(".safetensors"))[-1]
            with open(os.path.join(bad, shard), "r+b") as f:
                f.truncate(os.path.getsize(os.path.join(bad, shard)) // 2)
            prefix, env = TWO
            script = ('if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then m="$2"; else m="$1"; fi; '
                      'exec "$0" generate -m "$m" --tokens 1,2 -n 1 --threads 1')
            r = subprocess.run([*prefix, "sh", "-c", script, BINARY, MODEL, bad],
                               capture_output=True, text=True, env=env, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        lines = [l for l in r.stderr.splitlines() if l.startswith("error: rank 1: ")]
        self.assertEqual(len(lines), 2, r.stderr)  # printed by both ranks
        self.assertIn(shard, lines[0])


class Commands(unittest.TestCase):
    def test_generate_and_bench_model(self):
        prefix, env = TWO
        args = ["-m", MODEL, "--prompt", PROMPTS[1], "-n", "12", "--threads", "1"]
        one = subprocess.run([BINARY, "generate", *args], capture_output=True, text=True, timeout=120)
        two = subprocess.run([*prefix, BINARY, "generate", *args], capture_output=True, text=True,
                             env=env, timeout=120)
        self.assertEqual(two.returncode, 0, two.stderr)
        self.assertEqual(two.stdout, one.stdout)  # printed once, by the leader
        self.assertIn("split: rank 0 of 2: heads 0-1, routed experts 0-3 whole", two.stderr)
        self.assertIn("split: rank 1 of 2: heads 2-3, routed experts 4-7 whole", two.stderr)
        # Experts sliced by width: every rank holds every expert, the text is the same.
        width = subprocess.run([*prefix, BINARY, "generate", *args, "--moe-split", "width"],
                               capture_output=True, text=True, env=env, timeout=120)
        self.assertEqual(width.returncode, 0, width.stderr)
        self.assertEqual(width.stdout, one.stdout)
        self.assertRegex(width.stderr, r"split: rank 1 of 2: heads 2-3, every routed expert's "
                                       r"width \(\d+ of \d+ columns\)")
        r = subprocess.run([*prefix, BINARY, "bench", "model", "-m", MODEL, "--tokens", "8",
                            "--segment", "4", "--prompt-len", "16", "--threads", "1", "--json"],
                           capture_output=True, text=True, env=env, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertGreater(json.loads(r.stdout)["decode_tokens_per_s"], 0)

    def test_weight_dtype_q8_0(self):
        # The checkpoint requantised at load (--weight-dtype q8_0) on each rank's slices: the
        # slices cut at whole 32-value blocks at 2 ranks, so each rank holds the blocks one rank
        # makes of the whole weight, and the 32 greedy tokens are one rank's. In the file's row
        # layout (--repack off): re-laid, a 2-rank o_proj slice of 32 columns cannot take the
        # 64-column Q8_0_R16 layout one rank gives the whole o_proj, and the two kernels' FP32
        # orders part this random model at a near-tie (token 15).
        # Even in the row layout the sum of o_proj's two 32-column halves across ranks is in
        # another FP32 order than one rank's kernel takes where that kernel adds the blocks in
        # vector lanes (the AVX2 GEMV: a ~1e-7 change, which parts the greedy chains at the same
        # near-tie, token 15, on AVX2-only CPUs). A requantised slice holding other blocks than
        # one rank's would move the logits by the Q8_0 error (~1e-2; the checkpoint's FP8 weights
        # and their Q8_0 requantisation part at the second token): the first 12 tokens must
        # agree, and all 32 must be made.
        prefix, env = TWO
        args = ["generate", "-m", MODEL, "--tokens", "1,2,3,4,5,6,7,8", "-n", "32", "--ignore-eos",
                "--threads", "1", "--matmul-dtype", "f32", "--attention-dtype", "f32", "--json",
                "--weight-dtype", "q8_0", "--repack", "off"]
        one = subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=120)
        two = subprocess.run([*prefix, BINARY, *args], capture_output=True, text=True, env=env,
                             timeout=120)
        self.assertEqual(one.returncode, 0, one.stderr)
        self.assertEqual(two.returncode, 0, two.stderr)
        want = json.loads(one.stdout)["generated"]
        got = json.loads(two.stdout)["generated"]
        self.assertEqual(len(want), 32)
        self.assertEqual(len(got), 32)
        self.assertEqual(got[:12], want[:12])

    def test_gguf_q8_0(self):
        # A Q8_0 GGUF of the same checkpoint (`mla quantize`): its blocks sliced per rank (whole
        # blocks at 2 ranks: each rank's 2 heads are 32 columns of o_proj, one Q8_0 block), re-laid
        # for the VNNI kernels or not. o_proj's two blocks are summed across ranks after each
        # rank's own rounding, where one rank's kernel rounds them in its own FP32 order (the AVX2
        # GEMV's 4 accumulators parted the greedy chains at a near-tie, token 30 of 32, on Zen 3);
        # a slice holding wrong blocks moves the logits by the Q8_0 error and parts at once
        # (test_weight_dtype_q8_0): the first 12 tokens must agree, and all 32 must be made.
        with tempfile.TemporaryDirectory(prefix="mla-ranks-") as tmp:
            gguf = os.path.join(tmp, "q8_0.gguf")
            q = subprocess.run([BINARY, "quantize", "-m", MODEL, "--type", "q8_0", "--out", gguf],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(q.returncode, 0, q.stderr)
            prefix, env = TWO
            args = ["generate", "-m", gguf, "--tokens", "1,2,3,4,5,6,7,8", "-n", "32",
                    "--ignore-eos", "--threads", "1", "--matmul-dtype", "f32",
                    "--attention-dtype", "f32", "--json"]
            for repack in ("on", "off"):
                one = subprocess.run([BINARY, *args, "--repack", repack], capture_output=True,
                                     text=True, timeout=120)
                two = subprocess.run([*prefix, BINARY, *args, "--repack", repack],
                                     capture_output=True, text=True, env=env, timeout=120)
                self.assertEqual(one.returncode, 0, one.stderr)
                self.assertEqual(two.returncode, 0, two.stderr)
                want = json.loads(one.stdout)["generated"]
                got = json.loads(two.stdout)["generated"]
                self.assertEqual(len(want), 32)
                self.assertEqual(len(got), 32)
                self.assertEqual(got[:12], want[:12], f"--repack {repack}")
                self.assertNotIn("warning: rank", two.stderr)
            # At 4 ranks each rank's head is 16 columns, half a block: the slice is held as F32
            # (FP32 products where one rank runs int8 ones), and every rank says so, naming it.
            four, env4 = mpirun(4)
            r = subprocess.run([*four, BINARY, *args[:5], "-n", "1", "--threads", "1"],
                               capture_output=True, text=True, env=env4, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stderr, r"warning: rank 1 of 4: .*q8_0\.gguf: 4 weight slices cut "
                                       r"inside their GGUF blocks, held as F32 .*: layer 0 o_proj "
                                       r"\(Q8_0 columns \[16, 32\) of 64\)")
            self.assertEqual(r.stderr.count("weight slices cut inside their GGUF blocks"), 4)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
