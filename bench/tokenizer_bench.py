#!/usr/bin/env python3
"""Side-by-side tokenizer throughput: mla (bench/tokenizer_bench.cc) and Hugging Face
`tokenizers` encoding the same corpus with the real DeepSeek-V3 tokenizer, one thread each.

  python3 bench/tokenizer_bench.py BUILD/bin/mla_bench_tokenizer

The corpus is built deterministically from text in this repository (docs, C++ sources, the
multilingual golden corpus): English prose, code, CJK and Unicode soup.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# DeepSeek-V3's tokenizer.json, from the folder MLA_DEEPSEEK_V3_TOKENIZER_DIR names.
V3_JSON = os.path.join(os.environ.get("MLA_DEEPSEEK_V3_TOKENIZER_DIR", "."), "tokenizer.json")


def build_corpus():
    parts = []
    for pattern in ("docs/**/*.md", "src/**/*.cc", "src/**/*.h"):
        for path in sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True)):
            with open(path, encoding="utf-8", errors="replace", newline="") as f:
                parts.append(f.read())
    with open(os.path.join(ROOT, "tests/data/tokenizer/deepseek_v3_golden.json"), encoding="utf-8") as f:
        parts.append("\n\n".join(c["text"] for c in json.load(f)["cases"]))
    return "\n\n".join(parts)


def best_of(fn, reps=5):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    corpus = build_corpus()
    data = corpus.encode("utf-8")
    paragraphs = [p for p in corpus.split("\n\n")]
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(data)
        corpus_path = f.name
    rows = []
    try:
        env = dict(os.environ, MLA_TOKENIZER_BENCH_CORPUS=corpus_path, MLA_TOKENIZER_BENCH_JSON=V3_JSON)
        out = subprocess.run([sys.argv[1], "--benchmark_format=json"], env=env, check=True,
                             capture_output=True).stdout
        ours = {b["name"]: b["bytes_per_second"] / 1e6 for b in json.loads(out)["benchmarks"]}
        try:
            from tokenizers import Tokenizer
            import tokenizers
        except ImportError:
            print("tokenizers not installed: mla numbers only")
            Tokenizer = None
        hf = {}
        if Tokenizer is not None:
            with open(V3_JSON, encoding="utf-8") as f:
                spec = json.load(f)
            full = Tokenizer.from_str(json.dumps(spec))
            spec["added_tokens"] = []
            plain = Tokenizer.from_str(json.dumps(spec))
            mb = len(data) / 1e6
            hf["BM_EncodeWhole"] = mb / best_of(lambda: plain.encode(corpus, add_special_tokens=False))
            hf["BM_EncodeWholeSpecial"] = mb / best_of(lambda: full.encode(corpus, add_special_tokens=False))
            hf["BM_EncodeParagraphs"] = mb / best_of(
                lambda: [plain.encode(p, add_special_tokens=False) for p in paragraphs])
            ids = plain.encode(corpus, add_special_tokens=False).ids
            hf["BM_Decode"] = mb / best_of(lambda: plain.decode(ids))
            assert ids == json.loads(subprocess.run(
                [os.path.join(os.path.dirname(sys.argv[1]), "mla"), "tokenize", "--tokenizer", V3_JSON,
                 "--file", corpus_path, "--json"], check=True, capture_output=True).stdout)["ids"], \
                "mla and tokenizers disagree on the corpus"
        print(f"corpus: {len(data)/1e6:.2f} MB, {len(paragraphs)} paragraphs; one thread; "
              f"tokenizers {tokenizers.__version__ if hf else '-'}")
        print(f"{'benchmark':<24}{'mla MB/s':>10}{'HF MB/s':>10}{'ratio':>8}")
        for name, mbs in ours.items():
            other = hf.get(name)
            ratio = f"{mbs / other:.1f}x" if other else "-"
            print(f"{name:<24}{mbs:>10.1f}{(other or 0):>10.1f}{ratio:>8}")
    finally:
        os.unlink(corpus_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
