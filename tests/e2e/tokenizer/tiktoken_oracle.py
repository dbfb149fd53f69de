#!/usr/bin/env python3
"""The `tiktoken` package as the oracle for mla's tiktoken models (Kimi-K2, Moonlight).

  generate          write tests/data/tokenizer/tiktoken_small/ (a ranks file trained here on the
                    corpus, plus tokens that a naive conversion to merges gets wrong) and
                    tiktoken_golden.json (tiktoken's ids for the DeepSeek tokenizer corpus);
                    needs tiktoken, run by hand, results committed
  golden MLA        `MLA tokenize` on tiktoken_small against the committed golden (no tiktoken
                    needed: what CI always checks)
  live MLA [N]      `MLA tokenize` against tiktoken built from the same files, for tiktoken_small
                    and the tiktoken.model that `MLA make-tiny --family kimi-k2 | moonlight`
                    writes, on the corpus plus N (default 2000) fresh seeded random strings;
                    also regenerates the golden in memory and compares it with the committed one;
                    prints "skipped: tiktoken not installed" without the oracle

The corpus is the DeepSeek tokenizer tests' (the texts of deepseek_v3_golden.json, written by
tests/e2e/tokenizer_oracle.py) plus the cases in TRICKY. The split pattern is Kimi's; the special
tokens come from tokenizer_config.json's added_tokens_decoder, as mla reads them.
"""
import base64
import collections
import json
import os
import random
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import tokenizer_oracle  # noqa: E402  (the DeepSeek corpus generator)

ROOT = tokenizer_oracle.ROOT
DATA = tokenizer_oracle.DATA
SMALL = os.path.join(DATA, "tiktoken_small")
GOLDEN = os.path.join(DATA, "tiktoken_golden.json")

# Kimi's pat_str (tokenization_kimi.py), alternative by alternative; src/tokenizer/tiktoken.cc
# holds the same list.
KIMI_PATTERN = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])

# Pieces where a naive conversion of ranks to merges goes wrong (see hand_tokens), words whose
# case and contractions the pattern splits, and Han next to kana and letters.
TRICKY = [
    "xqj", " xqj", "1xqj", "xqjxqj", "xxxq", "xxxqxxxq", " xxxq", "qxxxqqq", "xqqqxxx", "ABC'S don'T I'M we'LL", "ſ 's 'ſ", "CamelCaseHTTPServer", "ǅungla ǈ",
    "中文English日本語カタカナ한국어", "〇〆々〻 ⺀⼀ 𠀀𪜀𫝀𬺰", "x\u0301\u0308y", "12345 1,234.5",
    "[BOS]<|im_end|>hi<|im_user|>", "<|im_end", "  \n\n \t", "a\r\nb\rc\n",
]


def corpus():
    with open(os.path.join(DATA, "deepseek_v3_golden.json"), encoding="utf-8") as f:
        texts = [c["text"] for c in json.load(f)["cases"]]
    return texts + TRICKY


def load_ranks(path):
    ranks = {}
    with open(path, "rb") as f:
        for line in f.read().splitlines():
            if line:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    return ranks


def load_specials(model_dir):
    with open(os.path.join(model_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        decoder = json.load(f).get("added_tokens_decoder", {})
    return {v["content"]: int(k) for k, v in decoder.items()}


def encoding(tiktoken, model_dir):
    return tiktoken.Encoding(name=os.path.basename(model_dir), pat_str=KIMI_PATTERN,
                             mergeable_ranks=load_ranks(os.path.join(model_dir, "tiktoken.model")),
                             special_tokens=load_specials(model_dir))


def oracle_ids(enc, texts):
    """(plain, special): user text as plain text (mla's default), and with special tokens."""
    plain = [enc.encode(t, allowed_special=set(), disallowed_special=()) for t in texts]
    special = [enc.encode(t, allowed_special="all") for t in texts]
    return plain, special


# ---------------------------------------------------------------------------------------------
# The small ranks file


def bpe_pieces(ranks, piece):
    """tiktoken's merge loop on one piece (no whole-piece shortcut): a list of byte strings."""
    parts = [piece[i:i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best, at = None, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and (best is None or r < best):
                best, at = r, i
        if best is None:
            break
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    return parts


def train(texts, n_merges):
    """Plain frequency BPE over words: each merge's result gets the next rank."""
    words = collections.Counter()
    for t in texts:
        for w in re.findall(r" ?[^\W\d_]+| ?\d{1,3}| ?[^\w\s]+|\s+", t):
            words[tuple(bytes([b]) for b in w.encode())] += 1
    ranks = {bytes([b]): b for b in range(256)}
    for _ in range(n_merges):
        pairs = collections.Counter()
        for w, n in words.items():
            for a, b in zip(w, w[1:]):
                pairs[a, b] += n
        candidates = [(n, p) for p, n in pairs.items() if p[0] + p[1] not in ranks]
        if not candidates:
            break
        n, (a, b) = max(candidates, key=lambda x: (x[0], x[1]))
        ranks[a + b] = len(ranks)
        merged = collections.Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += c
        words = merged
    return ranks


def hand_tokens(ranks):
    """Tokens that break naive conversions, on letters the trained vocabulary leaves alone:
    - "xqj", " xqj": no smaller tokens build them, so tiktoken emits them only for a piece that
      is the whole token (a conversion without that shortcut spells them out byte by byte);
    - "xx" < "qxxx" < "qx" < "xxx" < "xqqq": tiktoken builds "xxx" as "xx" + "x", so "xxxq" is
      "xxx", "q"; a converter that takes the first split of each token into two tokens
      ("x" + "xx") never merges it there and gives "xx", "x", "q".
    generate() checks that both naive conversions do differ on TRICKY.
    """
    extra = [b"xx", b"qxxx", b"qx", b"xxx", b"xqqq", b"xqj", b" xqj"]
    for t in extra:
        assert t not in ranks, t
        ranks[t] = len(ranks)
    return ranks


def naive_differs(ranks, texts_pieces):
    """How many of the pieces the two naive conversions (see hand_tokens) get wrong."""
    def merge(merges, piece):
        parts = [piece[i:i + 1] for i in range(len(piece))]
        while len(parts) > 1:
            found = [(merges[p], i) for i, p in enumerate(zip(parts, parts[1:])) if p in merges]
            if not found:
                break
            _, i = min(found)
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        return parts
    first = {}
    for t, r in ranks.items():
        for i in range(1, len(t)):
            if t[:i] in ranks and t[i:] in ranks:
                first[t[:i], t[i:]] = r
                break
    wrong_first = sum(merge(first, p) != bpe_pieces(ranks, p) for p in texts_pieces)
    wrong_whole = sum(p in ranks and len(bpe_pieces(ranks, p)) > 1 for p in texts_pieces)
    return wrong_first, wrong_whole


def write_small(specials):
    os.makedirs(SMALL, exist_ok=True)
    texts = corpus()
    ranks = hand_tokens(train(texts[:600], 700))
    with open(os.path.join(SMALL, "tiktoken.model"), "w", encoding="ascii") as f:
        for token, rank in sorted(ranks.items(), key=lambda x: x[1]):
            f.write(f"{base64.b64encode(token).decode()} {rank}\n")
    first = len(ranks)
    decoder = {str(first + i): {"content": c, "lstrip": False, "normalized": False,
                                "rstrip": False, "single_word": False, "special": True}
               for i, c in enumerate(specials)}
    config = {"bos_token": "[BOS]", "eos_token": "[EOS]", "added_tokens_decoder": decoder,
              "tokenizer_class": "TikTokenTokenizer", "model_max_length": 1048576}
    with open(os.path.join(SMALL, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


SPECIALS = ["[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>",
            "<|im_middle|>", "[EOT]"]


def golden_doc(tiktoken, texts):
    plain, special = oracle_ids(encoding(tiktoken, SMALL), texts)
    return {"oracle": "tiktoken " + tiktoken.__version__, "model": "tests/data/tokenizer/tiktoken_small",
            "corpus": "deepseek_v3_golden.json texts + tiktoken_oracle.py TRICKY",
            "cases": [{"text": t, "ids": p, "ids_special": s}
                      for t, p, s in zip(texts, plain, special)]}


def generate():
    tiktoken = import_tiktoken()
    if tiktoken is None:
        sys.exit("generate needs `tiktoken` (pip install tiktoken)")
    write_small(SPECIALS)
    wrong = naive_differs(load_ranks(os.path.join(SMALL, "tiktoken.model")),
                          [t.encode() for t in ("xxxq", "xqj", " xqj", "qxxxqqq")])
    assert all(wrong), f"the hand-made tokens no longer trip the naive conversions: {wrong}"
    doc = golden_doc(tiktoken, corpus())
    with open(GOLDEN, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print("wrote", SMALL, "and", GOLDEN, "with tiktoken", tiktoken.__version__)


# ---------------------------------------------------------------------------------------------
# Comparisons


def import_tiktoken():
    try:
        import tiktoken
        return tiktoken
    except ImportError:
        return None


def run_mla(mla, model_dir, texts, special):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps(t, ensure_ascii=True) + "\n")
        path = f.name
    try:
        cmd = [mla, "tokenize", "-m", model_dir, "--batch", path] + (["--special"] if special else [])
        out = subprocess.run(cmd, capture_output=True, check=True).stdout.decode()
    finally:
        os.unlink(path)
    return [json.loads(line) for line in out.splitlines()]


def compare(name, texts, want, got):
    bad = [i for i, (a, b) in enumerate(zip(want, got)) if a != b]
    if len(got) != len(want):
        bad.append(-1)
    print(f"{name}: {len(texts)} strings, {len(bad)} mismatches")
    for i in bad[:5]:
        print("  text:", json.dumps(texts[i])[:300] if i >= 0 else "(count)")
        print("  want:", want[i][:40] if i >= 0 else len(want))
        print("  got: ", got[i][:40] if i >= 0 else len(got))
    return len(bad)


def golden(mla):
    with open(GOLDEN, encoding="utf-8") as f:
        doc = json.load(f)
    texts = [c["text"] for c in doc["cases"]]
    failures = 0
    for special, key in ((False, "ids"), (True, "ids_special")):
        failures += compare(f"tiktoken_small special={special} vs golden ({doc['oracle']})", texts,
                            [c[key] for c in doc["cases"]], run_mla(mla, SMALL, texts, special))
    print(f"{failures} mismatches against {GOLDEN}")
    return 1 if failures else 0


def v3_ranks_dir(out):
    """A realistic 128k-token ranks file: DeepSeek-V3's vocabulary (shared data, when present)
    with each token's id as its rank. Its merges were not made by tiktoken's rule, so it holds
    tokens that tiktoken builds along other splits or cannot build at all."""
    if not os.path.exists(tokenizer_oracle.V3_JSON):
        return None
    with open(tokenizer_oracle.V3_JSON, encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    bs = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
    cs = bs + [256 + i for i in range(256 - len(bs))]
    byte_of = dict(zip((chr(c) for c in cs), bs + [b for b in range(256) if b not in bs]))
    os.makedirs(out)
    with open(os.path.join(out, "tiktoken.model"), "w", encoding="ascii") as f:
        for text, rank in sorted(vocab.items(), key=lambda x: x[1]):
            if all(c in byte_of for c in text):
                raw = bytes(byte_of[c] for c in text)
                f.write(f"{base64.b64encode(raw).decode()} {rank}\n")
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"added_tokens_decoder": {"128000": {"content": "<|im_end|>", "special": True}}}, f)
    return out


def live(mla, n):
    tiktoken = import_tiktoken()
    if tiktoken is None:
        print("skipped: tiktoken not installed")
        return 0
    seed = int(os.environ.get("MLA_TOKENIZER_SEED", "99"))
    texts = corpus() + tokenizer_oracle.random_corpus(seed, n)
    failures = 0
    # The committed golden is what this tiktoken gives today.
    with open(GOLDEN, encoding="utf-8") as f:
        committed = json.load(f)["cases"]
    fresh = golden_doc(tiktoken, [c["text"] for c in committed])["cases"]
    stale = sum(a != b for a, b in zip(committed, fresh))
    print(f"golden vs tiktoken {tiktoken.__version__}: {stale} stale cases")
    failures += stale
    with tempfile.TemporaryDirectory() as tmp:
        dirs = [SMALL]
        for family in ("kimi-k2", "moonlight"):
            out = os.path.join(tmp, family)
            subprocess.run([mla, "make-tiny", "--family", family, "--layers", "1", "--shards", "1",
                            "--out", out], capture_output=True, check=True)
            assert not os.path.exists(os.path.join(out, "tokenizer.json")), out
            dirs.append(out)
        v3 = v3_ranks_dir(os.path.join(tmp, "deepseek-v3-ranks"))
        if v3:
            dirs.append(v3)
        else:
            print("not found, not compared: ranks from", tokenizer_oracle.V3_JSON)
        for d in dirs:
            plain, special = oracle_ids(encoding(tiktoken, d), texts)
            for flag, want in ((False, plain), (True, special)):
                failures += compare(f"{os.path.basename(d)} special={flag}", texts, want,
                                    run_mla(mla, d, texts, flag))
    print(f"compared with tiktoken {tiktoken.__version__}: {failures} mismatches")
    return 1 if failures else 0


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "generate":
        generate()
        return 0
    if len(sys.argv) >= 3 and sys.argv[1] == "golden":
        return golden(sys.argv[2])
    if len(sys.argv) >= 3 and sys.argv[1] == "live":
        return live(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 2000)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
