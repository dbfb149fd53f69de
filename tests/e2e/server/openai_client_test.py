#!/usr/bin/env python3
"""`mla serve` driven by the official `openai` Python client (PyPI, pinned in scripts/lib.sh):
chat and completions, streamed and not, usage, stop, max_tokens, seed determinism, logprobs,
errors (401 wrong key, 404 unknown model, 400 naming the param), parallel clients getting the
sequential greedy outputs, and a disconnecting client freeing its KV pages (seen in /metrics).

Usage: openai_client_test.py MLA_BINARY MODEL_DIR   (exit 77: skipped, openai not installed)
"""
import concurrent.futures
import socket
import sys
import time
import unittest

from mla_server import MlaServer, find_binary_and_model

try:
    import openai
except ImportError:
    print("skipped: the openai package is not installed")
    sys.exit(77)

BINARY, MODEL = find_binary_and_model(sys.argv)
KEY = "sk-test-0123456789"
SERVER = None


def setUpModule():
    global SERVER
    SERVER = MlaServer(BINARY, MODEL, "--api-key", KEY, "--max-num-seqs", "8")


def tearDownModule():
    if SERVER:
        assert SERVER.stop() == 0, "mla serve did not exit 0 on SIGTERM"


def client(key=KEY):
    return openai.OpenAI(base_url=SERVER.base_url + "/v1", api_key=key, max_retries=0, timeout=60)


HELLO = [{"role": "user", "content": "Hello! Who are you?"}]


class ChatTest(unittest.TestCase):
    def test_non_streamed_shape_and_usage(self):
        r = client().chat.completions.create(model=SERVER.model_id, messages=HELLO, max_tokens=8,
                                             temperature=0)
        self.assertEqual(r.object, "chat.completion")
        self.assertTrue(r.id.startswith("chatcmpl-"))
        self.assertEqual(r.model, SERVER.model_id)
        self.assertEqual(len(r.choices), 1)
        c = r.choices[0]
        self.assertEqual(c.index, 0)
        self.assertEqual(c.message.role, "assistant")
        self.assertIsInstance(c.message.content, str)
        self.assertIn(c.finish_reason, ("stop", "length"))
        self.assertLessEqual(r.usage.completion_tokens, 8)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)
        # The prompt count is the chat template's: the same as /tokenize of the messages.
        _, _, t = SERVER.post_json("/tokenize", {"messages": HELLO},
                                   {"Authorization": "Bearer " + KEY})
        self.assertEqual(r.usage.prompt_tokens, t["count"])

    def test_stream_matches_non_stream(self):
        args = dict(model=SERVER.model_id, messages=HELLO, max_tokens=12, temperature=0,
                    extra_body={"ignore_eos": True})
        whole = client().chat.completions.create(**args)
        chunks = list(client().chat.completions.create(
            stream=True, stream_options={"include_usage": True}, **args))
        self.assertGreaterEqual(len(chunks), 3)
        self.assertEqual({c.id for c in chunks}, {chunks[0].id})
        self.assertTrue(all(c.object == "chat.completion.chunk" for c in chunks))
        first = chunks[0].choices[0]
        self.assertEqual(first.delta.role, "assistant")
        self.assertFalse(first.delta.content)
        # include_usage: one last chunk without choices and with the usage; null usage before.
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 12)
        self.assertTrue(all(c.usage is None for c in chunks[:-1]))
        finishes = [c.choices[0].finish_reason for c in chunks[:-1]]
        self.assertEqual(finishes[-1], "length")
        self.assertTrue(all(f is None for f in finishes[:-1]), finishes)
        text = "".join(c.choices[0].delta.content or "" for c in chunks[:-1])
        self.assertEqual(text, whole.choices[0].message.content)
        self.assertEqual(whole.usage.completion_tokens, 12)

    def test_stream_without_usage_has_no_usage_chunk(self):
        chunks = list(client().chat.completions.create(model=SERVER.model_id, messages=HELLO,
                                                       max_tokens=3, temperature=0, stream=True))
        self.assertTrue(all(c.choices for c in chunks))
        self.assertIsNotNone(chunks[-1].choices[0].finish_reason)

    def test_logprobs(self):
        r = client().chat.completions.create(model=SERVER.model_id, messages=HELLO, max_tokens=4,
                                             temperature=0, logprobs=True, top_logprobs=3,
                                             extra_body={"ignore_eos": True})
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), 4)
        for t in content:
            self.assertLessEqual(t.logprob, 0.0)
            self.assertEqual(len(t.top_logprobs), 3)
            # Greedy: the chosen token is the most likely one.
            self.assertAlmostEqual(t.top_logprobs[0].logprob, t.logprob, places=5)
            self.assertEqual(bytes(t.bytes).decode("utf-8", "replace"), t.token)

    def test_penalties_pick_the_argmax_of_the_penalised_logprobs(self):
        # vLLM's frequency / presence penalties (docs/SERVING.md "Sampling"), greedy: each chosen
        # token is the best of the reported top-20 logprobs once the output so far is counted.
        freq, presence = 1.5, 0.5
        r = client().chat.completions.create(
            model=SERVER.model_id, messages=HELLO, max_tokens=24, temperature=0,
            frequency_penalty=freq, presence_penalty=presence, logprobs=True, top_logprobs=20,
            extra_body={"ignore_eos": True, "return_tokens_as_token_ids": True})
        counts, changed = {}, 0
        for t in r.choices[0].logprobs.content:
            def penalised(e):
                c = counts.get(e.token, 0)
                return e.logprob - (c * freq + presence if c else 0.0)
            best = max(t.top_logprobs, key=penalised)
            self.assertEqual(t.token, best.token)
            changed += best.token != t.top_logprobs[0].token
            counts[t.token] = counts.get(t.token, 0) + 1
        self.assertGreater(changed, 0, "the penalties changed no choice: nothing was checked")
        with self.assertRaises(openai.BadRequestError) as e:
            client().chat.completions.create(model=SERVER.model_id, messages=HELLO, max_tokens=2,
                                             extra_body={"min_tokens": 3})
        self.assertEqual(e.exception.body.get("param"), "min_tokens")

    def test_n_samples_are_their_own_requests_with_seed_plus_i(self):
        # n = 3: the prompt is computed once and choice i samples with seed + i, so it equals a
        # request of its own with that seed; the usage counts the prompt once.
        kw = dict(model=SERVER.model_id, messages=HELLO, max_tokens=12, temperature=1.0,
                  extra_body={"ignore_eos": True})
        r = client().chat.completions.create(n=3, seed=50, **kw)
        self.assertEqual([c.index for c in r.choices], [0, 1, 2])
        alone = [client().chat.completions.create(seed=50 + i, **kw) for i in range(3)]
        for c, a in zip(r.choices, alone):
            self.assertEqual(c.message.content, a.choices[0].message.content)
        self.assertEqual(r.usage.prompt_tokens, alone[0].usage.prompt_tokens)
        self.assertEqual(r.usage.completion_tokens, sum(a.usage.completion_tokens for a in alone))
        self.assertGreater(len({c.message.content for c in r.choices}), 1)
        # Streamed: the same three texts, told apart by their index.
        texts = ["", "", ""]
        for chunk in client().chat.completions.create(n=3, seed=50, stream=True, **kw):
            for c in chunk.choices:
                texts[c.index] += c.delta.content or ""
        self.assertEqual(texts, [c.message.content for c in r.choices])
        # Completions: two prompts times n = 2 are four choices, prompt-major.
        two = client().completions.create(model=SERVER.model_id, prompt=["Once", "Then"], n=2,
                                          max_tokens=6, temperature=1.0, seed=9,
                                          extra_body={"ignore_eos": True})
        self.assertEqual([c.index for c in two.choices], [0, 1, 2, 3])
        for i, p in enumerate(["Once", "Then"]):
            for j in range(2):
                one = client().completions.create(model=SERVER.model_id, prompt=p, max_tokens=6,
                                                  temperature=1.0, seed=9 + j,
                                                  extra_body={"ignore_eos": True})
                self.assertEqual(two.choices[2 * i + j].text, one.choices[0].text)

    def test_truncate_prompt_tokens_keeps_the_last_k(self):
        # vLLM's left truncation: the reply to 30 ids truncated to 5 is the reply to the last 5.
        ids = [(7 * i + 3) % 250 + 3 for i in range(30)]
        kw = dict(model=SERVER.model_id, max_tokens=6, temperature=0,
                  extra_body={"ignore_eos": True})
        cut = client().completions.create(prompt=ids, **{**kw, "extra_body": {
            "ignore_eos": True, "truncate_prompt_tokens": 5}})
        last = client().completions.create(prompt=ids[-5:], **kw)
        self.assertEqual(cut.usage.prompt_tokens, 5)
        self.assertEqual(cut.choices[0].text, last.choices[0].text)
        with self.assertRaises(openai.BadRequestError) as e:
            client().completions.create(prompt=ids, **{**kw, "extra_body": {
                "truncate_prompt_tokens": 0}})
        self.assertEqual(e.exception.body["param"], "truncate_prompt_tokens")

    def test_seed_determinism(self):
        def sample(seed):
            return client().chat.completions.create(
                model=SERVER.model_id, messages=HELLO, max_tokens=16, temperature=1.0, seed=seed,
                extra_body={"ignore_eos": True}).choices[0].message.content
        a = sample(1234)
        self.assertEqual(a, sample(1234))
        self.assertTrue(any(sample(s) != a for s in (1, 2, 3)), "the seed changes nothing")

    def test_max_completion_tokens(self):
        r = client().chat.completions.create(model=SERVER.model_id, messages=HELLO,
                                             max_completion_tokens=5, temperature=0,
                                             extra_body={"ignore_eos": True})
        self.assertEqual(r.usage.completion_tokens, 5)
        self.assertEqual(r.choices[0].finish_reason, "length")


class CompletionsTest(unittest.TestCase):
    def greedy(self, prompt, n, extra=None, **kw):
        return client().completions.create(model=SERVER.model_id, prompt=prompt, max_tokens=n,
                                           temperature=0,
                                           extra_body={"ignore_eos": True, **(extra or {})}, **kw)

    def test_default_max_tokens_is_16(self):
        r = client().completions.create(model=SERVER.model_id, prompt="The capital of France is",
                                        temperature=0, extra_body={"ignore_eos": True})
        self.assertEqual(r.object, "text_completion")
        self.assertEqual(r.usage.completion_tokens, 16)
        self.assertEqual(r.choices[0].finish_reason, "length")

    def test_prompt_forms(self):
        text = self.greedy("abc def", 6).choices[0].text
        _, _, t = SERVER.post_json("/tokenize", {"prompt": "abc def"},
                                   {"Authorization": "Bearer " + KEY})
        self.assertEqual(self.greedy(t["tokens"], 6).choices[0].text, text)
        many = self.greedy(["abc def", "xyz"], 6)
        self.assertEqual([c.index for c in many.choices], [0, 1])
        self.assertEqual(many.choices[0].text, text)
        self.assertEqual(many.usage.completion_tokens, 12)
        echo = self.greedy("abc def", 6, echo=True)
        self.assertEqual(echo.choices[0].text, "abc def" + text)

    def test_stop_string_is_excluded(self):
        full = self.greedy("Once upon a time", 24).choices[0].text
        # A stop string from the middle of the greedy text: the reply ends right before it.
        stop = next((full[i:i + 2] for i in range(4, len(full) - 2)
                     if full[i:i + 2].isprintable() and "\ufffd" not in full[i:i + 2]), None)
        self.assertIsNotNone(stop, f"no usable stop string in {full!r}")
        r = self.greedy("Once upon a time", 24, stop=[stop])
        self.assertEqual(r.choices[0].text, full[:full.find(stop)])
        self.assertEqual(r.choices[0].finish_reason, "stop")

    def test_include_stop_str_and_special_tokens(self):
        full = self.greedy("Once upon a time", 24).choices[0].text
        stop = next((full[i:i + 2] for i in range(4, len(full) - 2)
                     if full[i:i + 2].isprintable() and "\ufffd" not in full[i:i + 2]), None)
        self.assertIsNotNone(stop, f"no usable stop string in {full!r}")
        r = self.greedy("Once upon a time", 24, stop=[stop],
                        extra={"include_stop_str_in_output": True})
        self.assertEqual(r.choices[0].text, full[:full.find(stop) + len(stop)])
        # Special-token text in a completions prompt is the token (as HF tokenizers encode it).
        auth = {"Authorization": f"Bearer {KEY}"}
        bos = "<｜begin▁of▁sentence｜>"
        _, _, one = SERVER.post_json("/tokenize", {"prompt": bos}, headers=auth)
        _, _, two = SERVER.post_json("/tokenize", {"prompt": "x" + bos}, headers=auth)
        self.assertEqual(one["count"], 1)
        self.assertEqual(two["tokens"][-1], one["tokens"][0])
        # skip_special_tokens: a special token's text stays out of the reply unless asked for.
        bias = {str(one["tokens"][0]): 100}
        kept = self.greedy("Hi", 3, logit_bias=bias, extra={"skip_special_tokens": False})
        skipped = self.greedy("Hi", 3, logit_bias=bias)
        self.assertEqual(kept.choices[0].text, bos * 3)
        self.assertEqual(skipped.choices[0].text, "")

    def test_best_of_returns_the_most_likely_samples(self):
        # best_of 5, n 2: the 2 of the 5 seeded samples (sample i draws with seed + i, as the
        # n = 5 request shows) with the highest cumulative logprob, best first.
        kw = dict(model=SERVER.model_id, prompt="Once", max_tokens=8, temperature=1.0, seed=42,
                  extra_body={"ignore_eos": True})
        all5 = client().completions.create(n=5, logprobs=0, **kw)
        ranked = sorted(all5.choices, key=lambda c: -sum(c.logprobs.token_logprobs))
        best = client().completions.create(n=2, best_of=5, **kw)
        self.assertEqual([c.text for c in best.choices], [c.text for c in ranked[:2]])
        self.assertEqual([c.index for c in best.choices], [0, 1])
        self.assertIsNone(best.choices[0].logprobs)  # not asked for
        self.assertEqual(best.usage.completion_tokens, all5.usage.completion_tokens)
        with self.assertRaises(openai.BadRequestError) as cm:
            client().completions.create(n=1, best_of=2, stream=True, **kw)
        self.assertEqual(cm.exception.body["param"], "best_of")

    def test_prompt_logprobs_and_echo_with_logprobs(self):
        # The logprob of token t after prompt P, as the sampler reported it when generating t,
        # equals t's prompt logprob in the prompt P + [t]: the same row computed the same way
        # (prompts this short run on the dot-product path, row by row). It is bit for bit here;
        # 1e-5 allows a host whose kernels group rows differently to reassociate FP32 sums
        # (~1e-7 relative on logits of size ~10, ~1e-6 after log-softmax).
        auth = {"Authorization": f"Bearer {KEY}"}
        _, _, tok = SERVER.post_json("/tokenize", {"prompt": "Once upon a"}, headers=auth)
        prompt = tok["tokens"]
        gen = client().completions.create(model=SERVER.model_id, prompt=prompt, max_tokens=2,
                                          temperature=0, logprobs=0,
                                          extra_body={"ignore_eos": True})
        t1 = gen.choices[0].logprobs.tokens[0]
        lp1 = gen.choices[0].logprobs.token_logprobs[0]
        t1_id = int(t1.split(":")[1]) if t1.startswith("token_id:") else None
        if t1_id is None:
            _, _, t = SERVER.post_json("/tokenize", {"prompt": t1}, headers=auth)
            t1_id = t["tokens"][-1]
        for attempt in range(2):  # the second time the prompt is in the prefix cache
            r = client().completions.create(model=SERVER.model_id, prompt=prompt + [t1_id],
                                            max_tokens=1, temperature=0,
                                            extra_body={"prompt_logprobs": 2, "ignore_eos": True})
            plp = r.choices[0].model_extra["prompt_logprobs"]
            self.assertEqual(len(plp), len(prompt) + 1)
            self.assertIsNone(plp[0])
            last = plp[-1][str(t1_id)]
            self.assertAlmostEqual(last["logprob"], lp1, delta=1e-5)
            self.assertGreaterEqual(last["rank"], 1)
            self.assertTrue(all(len(p) >= 1 and len(p) <= 3 for p in plp[1:]))
        # echo + logprobs: the legacy object starts with the prompt's tokens, the first null.
        e = client().completions.create(model=SERVER.model_id, prompt=prompt + [t1_id],
                                        max_tokens=2, temperature=0, logprobs=1, echo=True,
                                        extra_body={"ignore_eos": True})
        lp = e.choices[0].logprobs
        self.assertEqual(len(lp.tokens), len(prompt) + 1 + 2)
        self.assertIsNone(lp.token_logprobs[0])
        self.assertIsNone(lp.top_logprobs[0])
        self.assertAlmostEqual(lp.token_logprobs[len(prompt)], lp1, delta=1e-5)
        self.assertEqual(lp.text_offset, sorted(lp.text_offset))
        # Streamed, both come in the first chunks and concatenate to the whole reply's.
        chunks = list(client().completions.create(
            model=SERVER.model_id, prompt=prompt + [t1_id], max_tokens=2, temperature=0,
            logprobs=1, echo=True, stream=True, extra_body={"ignore_eos": True}))
        streamed = {"tokens": [], "token_logprobs": [], "text_offset": []}
        for ch in chunks:
            if ch.choices and ch.choices[0].logprobs:
                for k in streamed:
                    streamed[k] += getattr(ch.choices[0].logprobs, k)
        self.assertEqual(streamed["tokens"], lp.tokens)
        self.assertEqual(streamed["token_logprobs"], lp.token_logprobs)
        self.assertEqual(streamed["text_offset"], lp.text_offset)
        self.assertEqual("".join(ch.choices[0].text for ch in chunks if ch.choices),
                         e.choices[0].text)
        chat = dict(model=SERVER.model_id, messages=HELLO, max_tokens=2, temperature=0,
                    extra_body={"prompt_logprobs": 1})
        whole = client().chat.completions.create(**chat).choices[0].model_extra["prompt_logprobs"]
        firsts = [ch.choices[0].model_extra.get("prompt_logprobs")
                  for ch in client().chat.completions.create(**chat, stream=True) if ch.choices]
        self.assertEqual([p for p in firsts if p is not None], [whole])

    def test_stream_legacy_logprobs(self):
        chunks = list(client().completions.create(
            model=SERVER.model_id, prompt="Hi", max_tokens=5, temperature=0, logprobs=2,
            stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
        lps = [c.choices[0].logprobs for c in chunks if c.choices and c.choices[0].logprobs]
        self.assertEqual(sum(len(lp.tokens) for lp in lps), 5)
        self.assertTrue(all(len(t) <= 2 for lp in lps for t in lp.top_logprobs))
        self.assertEqual(chunks[-1].usage.completion_tokens, 5)


class ErrorsTest(unittest.TestCase):
    def test_wrong_key_401(self):
        with self.assertRaises(openai.AuthenticationError) as cm:
            client("sk-wrong").chat.completions.create(model=SERVER.model_id, messages=HELLO)
        self.assertEqual(cm.exception.status_code, 401)
        self.assertNotIn(KEY, "".join(SERVER.log))  # never logged

    def test_unknown_model_404(self):
        with self.assertRaises(openai.NotFoundError) as cm:
            client().chat.completions.create(model="gpt-4o", messages=HELLO)
        self.assertEqual(cm.exception.status_code, 404)
        self.assertEqual(cm.exception.body["code"], "model_not_found")

    def test_bad_params_400_name_the_param(self):
        cases = [({"n": 17}, "n"), ({"n": 2, "best_of": 1}, "best_of"),
                 ({"n": 2, "best_of": 17}, "best_of"),
                 ({"temperature": -1}, "temperature"), ({"top_p": 0}, "top_p"),
                 ({"max_tokens": 0}, "max_tokens"), ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
                 ({"logit_bias": {"-1": 5}}, "logit_bias"), ({"top_logprobs": 3}, "top_logprobs"),
                 # vLLM extensions not served: refused by name, unless they ask for the default.
                 ({"use_beam_search": True}, "use_beam_search"),
                 ({"guided_json": {"type": "object"}}, "guided_json"),
                 ({"prompt_logprobs": 21}, "prompt_logprobs"),
                 ({"add_generation_prompt": False}, "add_generation_prompt"),
                 ({"cache_salt": "tenant-a"}, "cache_salt")]
        for extra, param in cases:
            with self.subTest(param=param), self.assertRaises(openai.BadRequestError) as cm:
                client().chat.completions.create(model=SERVER.model_id, messages=HELLO,
                                                 extra_body=extra)
            self.assertEqual(cm.exception.body["param"], param)
        defaults = {"use_beam_search": False, "length_penalty": 1.0, "add_generation_prompt": True,
                    "spaces_between_special_tokens": True, "priority": 5, "request_id": "r1"}
        r = client().chat.completions.create(model=SERVER.model_id, messages=HELLO, max_tokens=2,
                                             extra_body=defaults)
        self.assertEqual(len(r.choices), 1)

    def test_context_length_400_names_both_counts(self):
        with self.assertRaises(openai.BadRequestError) as cm:
            client().completions.create(model=SERVER.model_id, prompt="hi", max_tokens=10**9)
        self.assertRegex(cm.exception.message, r"maximum context length is \d+ tokens")

    def test_models_list(self):
        ids = [m.id for m in client().models.list()]
        self.assertEqual(ids, [SERVER.model_id])


class ConcurrencyTest(unittest.TestCase):
    PROMPTS = [f"Prompt number {i}: " + "word " * (3 * i) for i in range(8)]

    def run_one(self, prompt):
        return client().completions.create(model=SERVER.model_id, prompt=prompt, max_tokens=20,
                                           temperature=0,
                                           extra_body={"ignore_eos": True}).choices[0].text

    def test_parallel_equals_sequential(self):
        sequential = [self.run_one(p) for p in self.PROMPTS]
        with concurrent.futures.ThreadPoolExecutor(len(self.PROMPTS)) as ex:
            parallel = list(ex.map(self.run_one, self.PROMPTS))
        self.assertEqual(parallel, sequential)
        SERVER.wait_idle(headers={"Authorization": "Bearer " + KEY})

    def test_disconnect_frees_pages(self):
        auth = {"Authorization": "Bearer " + KEY}
        aborted = 'vllm:request_success_total{finished_reason="abort"}'
        before = SERVER.wait_idle(headers=auth)[aborted]
        # A stream the client drops after two chunks, while it still has 4000 tokens to go.
        stream = client().completions.create(model=SERVER.model_id, prompt="A long story:",
                                             max_tokens=4000, temperature=0, stream=True,
                                             extra_body={"ignore_eos": True})
        it = iter(stream)
        next(it), next(it)
        self.assertGreater(SERVER.metrics(auth)["vllm:kv_cache_blocks_used"], 0)
        stream.close()
        m = SERVER.wait_idle(timeout=2.0, headers=auth)
        self.assertEqual(m[aborted], before + 1)
        # A non-streamed request whose client hangs up before the answer.
        body = ('{"model": "%s", "prompt": "Tell me everything.", "max_tokens": 4000, '
                '"ignore_eos": true}' % SERVER.model_id).encode()
        s = socket.create_connection(("127.0.0.1", SERVER.port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                  KEY.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: " +
                  str(len(body)).encode() + b"\r\n\r\n" + body)
        deadline = time.time() + 5
        while SERVER.metrics(auth)["vllm:kv_cache_blocks_used"] == 0 and time.time() < deadline:
            time.sleep(0.01)
        s.close()
        m = SERVER.wait_idle(timeout=2.0, headers=auth)
        self.assertEqual(m[aborted], before + 2)


class ReasoningTest(unittest.TestCase):
    """--reasoning-parser deepseek_r1: chat replies split at </think> (tests/unit/server/
    reasoning_split_test.cc checks the split itself). The tiny model never writes </think>, so
    the whole reply is reasoning and content is null, as vLLM answers a thought cut short."""

    @classmethod
    def setUpClass(cls):
        cls.server = MlaServer(BINARY, MODEL, "--reasoning-parser", "deepseek_r1")

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def test_reasoning_content_whole_and_streamed(self):
        c = openai.OpenAI(base_url=self.server.base_url + "/v1", api_key="x", max_retries=0)
        msgs = [{"role": "user", "content": "What is two and two?"}]
        r = c.chat.completions.create(model=self.server.model_id, messages=msgs, max_tokens=20,
                                      temperature=0)
        m = r.choices[0].message
        self.assertIsNone(m.content)
        self.assertTrue(m.model_extra["reasoning_content"])
        chunks = list(c.chat.completions.create(model=self.server.model_id, messages=msgs,
                                                max_tokens=20, temperature=0, stream=True))
        deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
        self.assertEqual("".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas),
                         m.model_extra["reasoning_content"])
        self.assertFalse(any(d.content for d in deltas))
        # The default (auto) leaves a V3-format model's replies as content.
        plain = client().chat.completions.create(model=SERVER.model_id, messages=msgs,
                                                 max_tokens=20, temperature=0).choices[0].message
        self.assertEqual(plain.content, m.model_extra["reasoning_content"])
        self.assertNotIn("reasoning_content", plain.model_extra or {})


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather now at a place",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
CLOCK = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
OPENING = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"


class ToolsTest(unittest.TestCase):
    """Tool calling (docs/SERVING.md §Tool calling; the parser itself is checked on the models'
    exact texts in tests/unit/server/tool_call_parser_test.cc; forced calls decoded under their
    schema end to end in structured_output_test.py). The random-weight model never writes a
    valid call by itself, so these check the prompt, the forced call's opening, a call cut by
    max_tokens coming back as content, streamed == whole, and the refusals."""

    def test_tools_reach_the_prompt(self):
        base = {"model": SERVER.model_id, "messages": HELLO}
        _, _, plain = SERVER.post_json("/tokenize", base, headers={"Authorization": f"Bearer {KEY}"})
        _, _, with_tools = SERVER.post_json("/tokenize", {**base, "tools": [WEATHER, CLOCK]},
                                            headers={"Authorization": f"Bearer {KEY}"})
        self.assertGreater(with_tools["count"], plain["count"] + 40)
        r = client().chat.completions.create(model=SERVER.model_id, messages=HELLO, max_tokens=4,
                                             temperature=0, tools=[WEATHER, CLOCK])
        self.assertEqual(r.usage.prompt_tokens, with_tools["count"])
        self.assertIsNone(r.choices[0].message.tool_calls)
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))

    def test_forced_call_opening_and_malformed_call_as_content(self):
        kw = dict(model=SERVER.model_id, messages=HELLO, max_tokens=12, temperature=0,
                  tools=[WEATHER, CLOCK],
                  tool_choice={"type": "function", "function": {"name": "get_weather"}})
        r = client().chat.completions.create(**kw)
        m = r.choices[0].message
        # max_tokens cuts the call: the whole call, its forced opening included, is content.
        self.assertIsNone(m.tool_calls)
        self.assertTrue(m.content.startswith(OPENING), m.content)
        self.assertEqual(r.choices[0].finish_reason, "length")
        chunks = list(client().chat.completions.create(**kw, stream=True))
        deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
        self.assertEqual("".join(d.content or "" for d in deltas), m.content)
        self.assertFalse(any(d.tool_calls for d in deltas))
        self.assertEqual(chunks[-1].choices[0].finish_reason, "length")
        # tool_choice none: the tools stay in the prompt, replies are not parsed.
        none = client().chat.completions.create(**{**kw, "tool_choice": "none"})
        self.assertFalse(none.choices[0].message.content.startswith(OPENING))
        self.assertLess(none.usage.prompt_tokens, r.usage.prompt_tokens)

    def test_refusals_name_the_field(self):
        bad = [
            ({"tools": [{"type": "function", "function": {"name": "has space"}}]},
             "tools[0].function.name"),
            ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
            ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name"),
            ({"tools": [WEATHER], "tool_choice": {"type": "function",
                                                  "function": {"name": "nope"}}},
             "tool_choice.function.name"),
            ({"tool_choice": "required"}, "tool_choice"),
            ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
            ({"tools": [{"type": "function", "function": {"name": "f", "strict": True}}]},
             "tools[0].function.strict"),
            ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        ]
        for extra, param in bad:
            with self.subTest(param=param):
                with self.assertRaises(openai.BadRequestError) as cm:
                    client().chat.completions.create(model=SERVER.model_id, messages=HELLO,
                                                     max_tokens=2, extra_body=extra)
                self.assertEqual(cm.exception.body["param"], param)

    def test_tool_history_round_trip(self):
        # An assistant turn of calls and the tool results render and run (the prompt grows).
        msgs = HELLO + [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 18}'}]
        r = client().chat.completions.create(model=SERVER.model_id, messages=msgs, max_tokens=3,
                                             temperature=0, tools=[WEATHER])
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertGreater(r.usage.prompt_tokens, 60)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], *sys.argv[3:]], verbosity=2)  # extra args: test names
