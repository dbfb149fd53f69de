#!/usr/bin/env python3
"""Hugging Face `tokenizers` as the oracle for mla's tokenizer.

  generate          write the goldens under tests/data/tokenizer/ (corpus, ids, decodes, chat
                    prompts); run by hand when the corpus changes, results are committed
  live MLA [N]      compare `MLA tokenize --batch` with `tokenizers` on N (default 4000) fresh
                    seeded random strings per tokenizer and mode; exits 0 printing
                    "skipped: tokenizers not installed" when the oracle is missing

The real DeepSeek-V3 files are read from the folder MLA_DEEPSEEK_V3_TOKENIZER_DIR names (the
model's tokenizer.json and tokenizer_config.json; not part of the repository, compared only when
set); two small tokenizers trained with `tokenizers` (committed) cover the other components.
`live` also checks the tokenizer.json that `MLA make-tiny` writes (a DeepSeek family and MiniCPM3,
whose added tokens differ; the Kimi families write tiktoken.model, checked by
tests/e2e/tokenizer/tiktoken_oracle.py).
"""
import json
import os
import random
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "tokenizer")
V3_DIR = os.environ.get("MLA_DEEPSEEK_V3_TOKENIZER_DIR", "(MLA_DEEPSEEK_V3_TOKENIZER_DIR unset)")
V3_JSON = os.path.join(V3_DIR, "tokenizer.json")
TRAINED = ["tiny_bytelevel.json", "tiny_splits.json"]

# Handwritten cases, one or more per trap named in docs/TOKENIZER.md (§DeepSeek-V3
# tokenizer.json, §Pitfalls).
HANDWRITTEN = [
    "Hello! 毕老师！1 + 1 = 2", "Hello world", " leading space", "trailing space ", "",
    "a", " ", "  ", "\n", "\n\n\n", "\r\n", "line1\r\nline2\r\n", "\t\tindented\tcode\n",
    "0", "12", "123", "1234", "12345", "123456", "1234567", "12345678901234567890",
    " 12345", "v1.2.3", "3.14159", "1,000,000", "０１２３４５", "٣٤٥٦", "²³¹", "Ⅻ and ⅰⅱ", "½ ⅓",
    "中文测试", "我喜欢编程。", "日本語のテキストです。カタカナ", "ひらがな", "한국어 텍스트입니다",
    "Привет, мир!", "Ελληνικά κείμενο", "مرحبا بالعالم", "שלום עולם", "हिन्दी पाठ", "ไทย",
    "emoji 😀 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️", "🇺🇸🇯🇵", "e\u0301 a\u0308 n\u0303", "Z\u0351\u0364\u0311al\u0334go",
    "nbsp\u00a0here", "thin\u2009space", "ideographic\u3000space", "zero\u200bwidth", "bom\ufeffx",
    "mongolian\u180evowel", "line\u2028sep\u2029para", "nel\u0085x", "vt\x0bff\x0cx", "fs\x1cgs\x1dx",
    "def f(x):\n    return x**2  # square\n", "int main() { return 0; }\n", "if (a && b) { c++; }",
    "https://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Windows\\System32",
    "Hello!\n\nWorld.\n", "end.\n", "what?!\n\n", "(parens)\n", "...\n\n\n", "a,b;c:d",
    "don't won't I'm you're they've we'll he'd", "CamelCaseWord snake_case_word kebab-case",
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>hi<｜Assistant｜>",
    "<think>\nreasoning\n</think>\nanswer", "<|EOT|>", "<｜tool▁calls▁begin｜>", "<｜▁pad▁｜>",
    "<|begin_of_sentence|>", "<｜begin", "▁▁▁", "｜｜", "<｜place▁holder▁no▁7｜>",
    "x<｜User｜><｜User｜>y", "<｜User｜ >", "<<｜User｜>>", "   \n   \n", "a  \n  b", "\t \t\n",
    "ALL CAPS", "MiXeD cAsE", "naïve café résumé", "Straße", "ﬁ ligature", "Å Ω µ K",
    "$100 €50 ¥1000 £20", "50% off!!!", "#hashtag @mention", "**bold** _italic_ `code`",
    "```python\nprint('hi')\n```", "| a | b |\n|---|---|\n", "- item\n- item\n", "> quote",
]


def soup(rng, n_units):
    """A random string mixing scripts, spaces, digits, marks, emoji and special-token pieces."""
    pools = [
        (8, lambda: rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")),
        (3, lambda: "".join(rng.choice("etaoinshr") for _ in range(rng.randint(2, 9)))),
        (4, lambda: rng.choice(" \t\n\r") if rng.random() < 0.7 else rng.choice(["\r\n", "  ", "\n\n", " \n"])),
        (3, lambda: "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 9)))),
        (3, lambda: rng.choice("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")),
        (2, lambda: chr(rng.randint(0x4E00, 0x9FFF))),
        (1, lambda: chr(rng.randint(0x3040, 0x30FF))),
        (1, lambda: chr(rng.randint(0xAC00, 0xD7A3))),
        (1, lambda: chr(rng.randint(0x0400, 0x04FF))),
        (1, lambda: chr(rng.randint(0x0370, 0x03FF))),
        (1, lambda: chr(rng.randint(0x00A0, 0x024F))),
        (2, lambda: chr(rng.randint(0x0300, 0x036F))),
        (1, lambda: chr(rng.randint(0x0590, 0x06FF))),
        (1, lambda: chr(rng.randint(0x0900, 0x0DFF))),
        (2, lambda: chr(rng.randint(0x1F300, 0x1FAFF)) + rng.choice(["", "\u200d", "\ufe0f", "\U0001F3FD"])),
        (2, lambda: rng.choice("\u00a0\u1680\u180e\u2000\u2001\u2002\u2003\u2007\u2008\u2009\u200a"
                               "\u200b\u200c\u200d\u2028\u2029\u202f\u205f\u3000\ufeff\x85\x0b\x0c"
                               "\x1c\x1d\x1e\x1f\x00\x7f")),
        (2, lambda: rng.choice("０１２３٣٤۵६७²³¹½⅓ⅠⅫⅰ①⑳𝟙𝟚")),
        (2, lambda: rng.choice("！？。、，：；「」『』（）【】《》—…‘’“”«»¿¡§¶†•‰′″€£¥₹©®™°±×÷")),
        (2, lambda: rng.choice(["<｜User｜>", "<｜Assistant｜>", "<｜begin▁of▁sentence｜>",
                                "<｜end▁of▁sentence｜>", "<think>", "</think>", "<|EOT|>", "<｜", "｜>",
                                "▁", "<｜tool▁sep｜>", "<|endoftext|>", "<mask>", "<|a|>", "<|a|>b"])),
        (1, lambda: chr(rng.randint(0x20, 0xD7FF))),
        (1, lambda: chr(rng.randint(0xE000, 0xFFFD))),
        (1, lambda: chr(rng.randint(0x10000, 0x10FFFF))),
    ]
    weights = [w for w, _ in pools]
    return "".join(rng.choices(pools, weights)[0][1]() for _ in range(n_units))


def random_corpus(seed, count):
    rng = random.Random(seed)
    return [soup(rng, rng.randint(1, 40)) for _ in range(count)]


def import_tokenizers():
    try:
        import tokenizers  # noqa: F401
        return tokenizers
    except ImportError:
        return None


def load_pair(tk, path):
    """(full, plain): the tokenizer as published, and the same without added-token matching,
    which is what mla's default (user text is plain text) must equal."""
    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    full = tk.Tokenizer.from_str(json.dumps(spec))
    spec["added_tokens"] = []
    plain = tk.Tokenizer.from_str(json.dumps(spec))
    return full, plain


def encode_all(tok, texts):
    return [tok.encode(t, add_special_tokens=False).ids for t in texts]


# ---------------------------------------------------------------------------------------------
# Trained edge-case tokenizers


def train_tokenizers(tk):
    from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers, trainers
    rng = random.Random(7)
    train_text = HANDWRITTEN * 20 + [soup(rng, 30) for _ in range(3000)]

    # 1. GPT-2 style: ByteLevel with add_prefix_space and its own regex; added tokens with
    # lstrip/rstrip and one that is a prefix of another (leftmost-longest matching).
    t = tk.Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    t.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"], show_progress=False)
    t.train_from_iterator(train_text, trainer)
    t.add_tokens([AddedToken("<mask>", lstrip=True, rstrip=True), AddedToken("<|a|>"),
                  AddedToken("<|a|>b", special=True)])
    t.save(os.path.join(DATA, TRAINED[0]))

    # 2. Every Split behaviour, inversion, a literal String pattern, ignore_merges, and merges in
    # the older "a b" string form.
    t = tk.Tokenizer(models.BPE(ignore_merges=True))
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{N}"), behavior="merged_with_previous"),
        pre_tokenizers.Split(" ", behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"[\p{P}\p{S}]"), behavior="contiguous"),
        pre_tokenizers.Split(Regex(r"\p{Lo}+"), behavior="isolated", invert=True),
        pre_tokenizers.Split(Regex(r"\x{200b}|\x{feff}"), behavior="removed"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    t.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<s>", "</s>"], show_progress=False)
    t.train_from_iterator(train_text, trainer)
    path = os.path.join(DATA, TRAINED[1])
    t.save(path)
    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    spec["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in spec["model"]["merges"]]
    assert all(" " not in a and " " not in b for a, b in (m.split(" ") for m in spec["model"]["merges"]))
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False, separators=(",", ":"))


# ---------------------------------------------------------------------------------------------
# Goldens


def decode_cases(full, rng, count, limit):
    """Random id sequences (including ones that cut characters in half) and their decodes."""
    out = []
    for _ in range(count):
        ids = [rng.randrange(limit) for _ in range(rng.randint(1, 12))]
        out.append({"ids": ids, "text": full.decode(ids, skip_special_tokens=False),
                    "text_skip_special": full.decode(ids, skip_special_tokens=True)})
    return out


def write_golden(name, tokenizer_path, texts, full, plain, rng, n_decode):
    cases = [{"text": t, "ids": p, "ids_special": s}
             for t, p, s in zip(texts, encode_all(plain, texts), encode_all(full, texts))]
    # Splitting an encoding of CJK and emoji mid-character exercises the U+FFFD rules.
    decodes = decode_cases(full, rng, n_decode, full.get_vocab_size(with_added_tokens=True))
    for c in cases[:60]:
        ids = c["ids"]
        for cut in (1, len(ids) // 2):
            part = ids[cut:]
            if part:
                decodes.append({"ids": part, "text": full.decode(part),
                                "text_skip_special": full.decode(part, skip_special_tokens=True)})
    doc = {"tokenizer": tokenizer_path, "oracle": "tokenizers " + full.__class__.__module__,
           "cases": cases, "decode": decodes}
    with open(os.path.join(DATA, name), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


CHATS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "You are helpful"}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}],
    [{"role": "system", "content": "A"}, {"role": "system", "content": "B"},
     {"role": "user", "content": "1 + 1 = ?\n"}, {"role": "assistant", "content": "2."}],
    [{"role": "user", "content": "中文问题：今天天气怎么样？"}, {"role": "assistant", "content": "很好！"},
     {"role": "user", "content": "谢谢 🙏\n\n"}],
    [{"role": "user", "content": "  spaces  \t\n"}],
    # Two calls in one turn, their outputs, the answer: the shipped template closes the calls
    # only after a second one, so two is the case it renders right.
    [{"role": "system", "content": "Tools."}, {"role": "user", "content": "Weather in Paris?"},
     {"role": "assistant", "content": None, "tool_calls": [
         {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
         {"type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
     {"role": "tool", "content": '{"temp_c": 18}'}, {"role": "tool", "content": "12:00"},
     {"role": "assistant", "content": "18 C at noon."}, {"role": "user", "content": "Thanks"}],
]


def write_chat_golden(full):
    try:
        import jinja2
    except ImportError:
        print("jinja2 missing: chat golden not regenerated")
        return
    with open(os.path.join(V3_DIR, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(cfg["chat_template"])
    out = []
    for messages in CHATS:
        for gen in (False, True):
            text = template.render(messages=messages, add_generation_prompt=gen,
                                   bos_token=cfg["bos_token"]["content"])
            out.append({"messages": messages, "add_generation_prompt": gen, "text": text,
                        "ids": full.encode(text, add_special_tokens=False).ids})
    doc = {"template": "DeepSeek-V3 tokenizer_config.json chat_template rendered by jinja2 "
                       + jinja2.__version__, "cases": out}
    with open(os.path.join(DATA, "deepseek_v3_chat_golden.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")


def write_property_golden(tk):
    """Which code points the oracle's regex engine puts in each class the DeepSeek patterns use,
    probed through a Split pre-tokenizer, as [first, last] ranges."""
    from tokenizers import Regex, pre_tokenizers
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000 and cp != 1]
    doc = {}
    for name, pattern in (("L", r"\p{L}"), ("M", r"\p{M}"), ("N", r"\p{N}"), ("P", r"\p{P}"),
                          ("S", r"\p{S}"), ("s", r"\s")):
        split = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
        members = []
        for i in range(0, len(cps), 20000):
            text = "\x01".join(chr(c) for c in cps[i:i + 20000])
            members += [ord(p) for p, _ in split.pre_tokenize_str(text) if "\x01" not in p]
        ranges = []
        for cp in sorted(members):
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1][1] = cp
            else:
                ranges.append([cp, cp])
        doc[name] = ranges
    with open(os.path.join(DATA, "unicode_properties_golden.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")


def generate():
    tk = import_tokenizers()
    if tk is None:
        sys.exit("generate needs `tokenizers` (pip install tokenizers)")
    os.makedirs(DATA, exist_ok=True)
    rng = random.Random(20240601)
    full, plain = load_pair(tk, V3_JSON)
    texts = HANDWRITTEN + random_corpus(1, 900)
    write_golden("deepseek_v3_golden.json", "$MLA_DEEPSEEK_V3_TOKENIZER_DIR/tokenizer.json",
                 texts, full, plain, rng, 300)
    write_chat_golden(full)
    write_property_golden(tk)
    train_tokenizers(tk)
    for name in TRAINED:
        full, plain = load_pair(tk, os.path.join(DATA, name))
        write_golden(name.replace(".json", "_golden.json"), "tests/data/tokenizer/" + name,
                     HANDWRITTEN + random_corpus(2, 300), full, plain, rng, 100)
    print("goldens written to", DATA, "with tokenizers", tk.__version__)


# ---------------------------------------------------------------------------------------------
# Live comparison


def run_mla(mla, tokenizer_path, texts, special):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps(t, ensure_ascii=True) + "\n")
        path = f.name
    try:
        cmd = [mla, "tokenize", "--tokenizer", tokenizer_path, "--batch", path]
        if special:
            cmd.append("--special")
        out = subprocess.run(cmd, capture_output=True, check=True).stdout.decode()
    finally:
        os.unlink(path)
    return [json.loads(line) for line in out.splitlines()]


def tiny_tokenizers(mla, out_dir):
    """The tokenizer.json of tiny v3 and minicpm3 checkpoints written by `mla make-tiny`."""
    paths = []
    for family in ("v3", "minicpm3"):
        out = os.path.join(out_dir, family)
        subprocess.run([mla, "make-tiny", "--family", family, "--layers", "1", "--shards", "1",
                        "--out", out], capture_output=True, check=True)
        paths.append(os.path.join(out, "tokenizer.json"))
    return paths


def live(mla, n):
    tk = import_tokenizers()
    if tk is None:
        print("skipped: tokenizers not installed")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        return live_compare(tk, mla, n, tiny_tokenizers(mla, tmp))


def live_compare(tk, mla, n, extra_targets):
    seed = int(os.environ.get("MLA_TOKENIZER_SEED", "99"))
    rng = random.Random(seed)
    texts = random_corpus(seed, n)
    # A few long documents: pieces of everything glued together.
    texts += ["".join(rng.choice(texts + HANDWRITTEN) for _ in range(400)) for _ in range(5)]
    failures = 0
    compared = 0
    targets = [V3_JSON] + [os.path.join(DATA, name) for name in TRAINED] + extra_targets
    for path in targets:
        if not os.path.exists(path):
            # DeepSeek's files live outside the repository; the trained ones must exist.
            print(f"not found, not compared: {path}")
            failures += 0 if path == V3_JSON else 1
            continue
        full, plain = load_pair(tk, path)
        for special, oracle in ((False, plain), (True, full)):
            want = encode_all(oracle, texts)
            got = run_mla(mla, path, texts, special)
            bad = [i for i, (a, b) in enumerate(zip(want, got)) if a != b]
            if len(got) != len(want):
                bad.append(-1)
            compared += len(texts)
            name = os.path.relpath(path, os.path.dirname(os.path.dirname(path)))
            print(f"{name} special={special}: {len(texts)} strings, {len(bad)} mismatches")
            for i in bad[:5]:
                print("  text:", json.dumps(texts[i])[:300])
                print("  want:", want[i][:40])
                print("  got: ", got[i][:40] if i >= 0 else got[-1:])
            failures += len(bad)
    print(f"compared {compared} encodings with tokenizers {tk.__version__}: {failures} mismatches")
    return 1 if failures else 0


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "generate":
        generate()
        return 0
    if len(sys.argv) >= 3 and sys.argv[1] == "live":
        return live(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 4000)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
