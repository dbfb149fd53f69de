#!/usr/bin/env python3
# The bundled default model (models/tiny-kjv, trained by scripts/train_bundled_model.py) speaks
# through the engine: `mla generate` and `mla serve` without -m run it and produce readable
# English, and the engine's own logits give a held-out passage a perplexity near the one the
# training run measured in PyTorch (models/tiny-kjv/training.json). The exact logits against
# transformers are the model oracle's case `tiny-kjv` (model_oracle.py); this checks the whole
# path from text to text. Standard library only.
#
#   bundled_model_test.py MLA_BINARY
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODEL = os.path.join(ROOT, "models", "tiny-kjv")
sys.path.insert(0, os.path.join(HERE, "server"))
from mla_server import MlaServer  # noqa: E402

BINARY = None
# Genesis 8:1-3: chapter 8 is one of the chapters held out of training (every 20th from the 8th).
HELD_OUT = ("And God remembered Noah, and every living thing, and all the cattle that was with him "
            "in the ark: and God made a wind to pass over the earth, and the waters asswaged; The "
            "fountains also of the deep and the windows of heaven were stopped, and the rain from "
            "heaven was restrained; And the waters returned from off the earth continually: and "
            "after the end of the hundred and fifty days the waters were abated.")


def readable(text):
    """(ok, why): printable ASCII, at least 12 words, 90% of them letters with trailing
    punctuation (random weights give byte soup: control characters, broken UTF-8, no words)."""
    if any(not (c.isprintable() and ord(c) < 128) and c not in "\n\t" for c in text):
        return False, f"non-printable or non-ASCII characters in {text!r}"
    words = text.split()
    if len(words) < 12:
        return False, f"only {len(words)} words: {text!r}"
    good = sum(bool(re.fullmatch(r"[(\"']?[A-Za-z]+(['-][A-Za-z]+)*[,.;:!?)\"']*", w)) for w in words)
    if good < 0.9 * len(words):
        return False, f"{good} of {len(words)} words are words: {text!r}"
    return True, ""


class BundledModelTest(unittest.TestCase):
    def test_generate_without_a_model_argument_writes_english(self):
        r = subprocess.run([BINARY, "generate", "-p", "And God said unto Moses,", "-n", "48",
                            "--ignore-eos"], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        ok, why = readable(r.stdout)
        self.assertTrue(ok, why)

    def test_held_out_perplexity_through_the_engine(self):
        # The engine's prompt logits of the passage (one forward, FP32 products and attention),
        # scored as PyTorch scored the held-out chapters during training. One passage is not the
        # whole held-out set: it must land within a factor of 2 of the set's perplexity; a model
        # computed wrongly (a transposed weight, a RoPE slip) lands in the hundreds or thousands.
        tok = subprocess.run([BINARY, "tokenize", "--tokenizer", os.path.join(MODEL, "tokenizer.json"),
                              "--text", HELD_OUT, "--json"], capture_output=True, text=True, check=True)
        ids = [0] + json.loads(tok.stdout)["ids"]  # BOS first, as in training
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run([BINARY, "generate", "--tokens", ",".join(map(str, ids)), "-n", "1",
                                "--matmul-dtype", "f32", "--attention-dtype", "f32",
                                "--dump-activations", tmp], capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            logits = read_f32(os.path.join(tmp, "activations.safetensors"), "logits")
        vocab = len(logits) // len(ids)
        nll = 0.0
        for i in range(len(ids) - 1):
            row = logits[i * vocab:(i + 1) * vocab]
            mx = max(row)
            lse = mx + math.log(sum(math.exp(v - mx) for v in row))
            nll += lse - row[ids[i + 1]]
        ppl = math.exp(nll / (len(ids) - 1))
        with open(os.path.join(MODEL, "training.json")) as f:
            trained = json.load(f)["held_out_perplexity"]
        self.assertLess(ppl, 2 * trained, f"passage perplexity {ppl:.2f}, held-out set {trained:.2f}")
        print(f"held-out passage perplexity {ppl:.2f} through the engine (set: {trained:.2f})")

    def test_serve_without_a_model_argument_chats_in_english(self):
        s = MlaServer(BINARY, None)
        try:
            self.assertEqual(s.model_id, "tiny-kjv")
            status, _, raw = s.request("POST", "/v1/chat/completions", {
                "model": s.model_id, "max_tokens": 64, "temperature": 0.7, "seed": 3,
                "messages": [{"role": "user", "content": "And the LORD spake unto Moses, saying,"}]})
            self.assertEqual(status, 200, raw)
            reply = json.loads(raw)["choices"][0]["message"]["content"]
            ok, why = readable(reply)
            self.assertTrue(ok, why)
        finally:
            self.assertEqual(s.stop(), 0)


def read_f32(path, name):
    """One F32 tensor of a safetensors file, as a flat list (standard library only)."""
    import struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        info = header[name]
        assert info["dtype"] == "F32", info
        f.seek(8 + n + info["data_offsets"][0])
        data = f.read(info["data_offsets"][1] - info["data_offsets"][0])
    return list(struct.unpack(f"<{len(data) // 4}f", data))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: bundled_model_test.py MLA_BINARY")
    BINARY = sys.argv.pop(1)
    unittest.main()
