#!/usr/bin/env python3
"""Kimi chat templates, rendered by `transformers`, as the oracle for mla's Kimi chat formats.

  generate DIR      write tests/data/tokenizer/kimi_chat_golden.json: the CASES below rendered
                    by transformers' chat-template renderer (the one apply_chat_template runs)
                    with the real templates found in DIR; run by hand, the result is committed
  live MLA          the same rendering done afresh from the folder MLA_KIMI_TEMPLATES_DIR names,
                    compared with the committed golden and with `MLA chat-format --json` case by
                    case; prints "skipped: ..." without transformers or without that folder

The templates are Moonshot AI's, as llama.cpp keeps copies of Hugging Face files under
models/templates/ (the names below; each file's SHA-256 is recorded in the golden). They are not
part of the repository, only what they render.

- moonshotai-Kimi-K2-Thinking.jinja (Kimi-K2-Thinking's chat_template): `kimi-k2-thinking` renders
  every case as it does.
- moonshotai-Kimi-K2.jinja: Kimi-K2-Instruct's template of July 2025 (also in the llama-cpp-python
  source package on PyPI). The later Instruct template (Sept. 2025), which `kimi-k2` follows, is
  Thinking's without the <think></think> parts; the July one differs from it where it had faults
  the later one mended (a literal backslash-n after "## Return of ID", call ids renumbered, string
  arguments JSON-encoded a second time). `kimi-k2` is compared with it on the cases that avoid
  those (INSTRUCT_CASES): the tool declaration, calls whose ids are functions.NAME:INDEX with
  object arguments, turns after a system message.
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
GOLDEN = os.path.join(ROOT, "tests", "data", "tokenizer", "kimi_chat_golden.json")
TEMPLATES = {"kimi-k2-thinking": "moonshotai-Kimi-K2-Thinking.jinja", "kimi-k2": "moonshotai-Kimi-K2.jinja"}

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather now — in °C, for one city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "units": {"type": "string", "enum": ["metric", "imperial"]}},
        "required": ["city"], "additionalProperties": False}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web.\nReturns a list.",
    "parameters": {"type": "object", "properties": {
        "q": {"type": "string"}, "top_k": {"type": "number", "default": 2.5},
        "filters": {"type": "array", "items": {"type": "string"}}, "safe": {"type": "boolean"},
        "extra": {"type": ["object", "null"]}}, "required": ["q"]}}}
NOARGS = {"type": "function", "function": {"name": "now", "parameters": {}}}


def call(idx, name, args):
    return {"id": f"functions.{name}:{idx}", "type": "function",
            "function": {"name": name, "arguments": args}}


# (messages, tools): every case is rendered with and without the generation prompt.
CASES = [
    ([{"role": "user", "content": "Hi"}], None),
    ([{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}], None),
    ([{"role": "user", "content": "Weather in Paris?"}], [WEATHER]),
    ([{"role": "system", "content": "Use tools."}, {"role": "user", "content": "中文 and \"quotes\""}],
     [WEATHER, SEARCH, NOARGS]),
    ([{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": None, "tool_calls": [call(0, "get_weather", {"city": "Paris"})]}],
     [WEATHER]),
    ([{"role": "user", "content": "Paris and Rome?"},
      {"role": "assistant", "content": "Checking both.", "tool_calls": [
          call(0, "get_weather", {"city": "Paris", "days": 2}),
          call(1, "get_weather", {"city": "Rome", "units": "metric"})]}],
     [WEATHER]),
    ([{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": None, "tool_calls": [call(0, "get_weather", '{"city":"Paris"}')]},
      {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": '{"temp_c": 18}'},
      {"role": "assistant", "content": "It is 18 °C."}, {"role": "user", "content": "Thanks"}],
     [WEATHER]),
    ([{"role": "user", "content": "Search, then answer."},
      {"role": "assistant", "content": "", "reasoning_content": "I should search.",
       "tool_calls": [call(0, "search", {"q": "mla \\ \"x\"\n", "filters": ["a", "b"], "safe": True,
                                          "extra": None})]},
      {"role": "tool", "tool_call_id": "functions.search:0", "name": "search",
       "content": "result one\nresult two"}],
     [SEARCH]),
    ([{"role": "user", "name": "ann", "content": "Hi, I am Ann."},
      {"role": "assistant", "reasoning_content": "Greet her.", "content": "Hello Ann!"},
      {"role": "user", "content": "What time is it?"},
      {"role": "assistant", "content": None, "reasoning_content": "Call now.",
       "tool_calls": [call(0, "now", {})]},
      {"role": "tool", "tool_call_id": "functions.now:0", "content": "12:00"}],
     [NOARGS, WEATHER]),
    ([{"role": "system", "content": "A"}, {"role": "system", "content": "B"},
      {"role": "user", "content": "  spaces \t\n"}, {"role": "assistant", "content": "ok\n\n"}], None),
]

# The cases the July 2025 Instruct template renders as the later one does (see above): a system
# message (its default differs), no tool results, object arguments, ids that are the calls'
# positions, no names.
INSTRUCT_CASES = [c if c[0][0]["role"] == "system" else
                  ([{"role": "system", "content": "Tools."}] + c[0], c[1])
                  for c in (CASES[i] for i in (1, 2, 3, 4, 5, 9))]


def render_all(folder):
    from transformers.utils.chat_template_utils import render_jinja_template
    out = []
    for fmt, file in TEMPLATES.items():
        with open(os.path.join(folder, file), encoding="utf-8") as f:
            template = f.read()
        for messages, tools in CASES if fmt == "kimi-k2-thinking" else INSTRUCT_CASES:
            for gen in (True, False):
                text, _ = render_jinja_template(conversations=[messages], tools=tools,
                                                chat_template=template, add_generation_prompt=gen)
                case = {"format": fmt, "messages": messages, "add_generation_prompt": gen,
                        "text": text[0]}
                if tools:
                    case["tools"] = tools
                out.append(case)
    return out


def sha256(folder, file):
    with open(os.path.join(folder, file), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def numbers():
    """json.dumps of seeded random doubles over the magnitudes where repr changes notation."""
    import random
    rng = random.Random(20261205)
    xs = [rng.uniform(1, 10) * 10.0 ** rng.randint(-8, 20) * rng.choice((1, -1)) for _ in range(300)]
    xs += [float(rng.randint(0, 10 ** rng.randint(1, 17))) for _ in range(100)]
    xs += [round(rng.uniform(-100, 100), rng.randint(0, 6)) for _ in range(100)]
    return json.dumps(xs)


def golden_doc(folder):
    import transformers
    return {"source": f"rendered by transformers {transformers.__version__} render_jinja_template",
            "templates": {file: sha256(folder, file) for file in TEMPLATES.values()},
            "numbers": numbers(), "cases": render_all(folder)}


def generate(folder):
    with open(GOLDEN, "w", encoding="utf-8") as f:
        json.dump(golden_doc(folder), f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("written", GOLDEN)


def run_mla(mla, case, tokenizer):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump({k: case[k] for k in ("messages", "tools", "add_generation_prompt") if k in case},
                  f, ensure_ascii=False)
    try:
        got = subprocess.run([mla, "chat-format", "-m", tokenizer, "--chat-format", case["format"],
                              "--messages", f.name, "--json"], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if got.returncode != 0:
        return "error: " + got.stderr.strip()
    return json.loads(got.stdout)["prompt"]


def live(mla):
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("skipped: transformers not installed")
        return 0
    folder = os.environ.get("MLA_KIMI_TEMPLATES_DIR")
    if not folder:
        print("skipped: set MLA_KIMI_TEMPLATES_DIR to a folder holding " + ", ".join(TEMPLATES.values()))
        return 0
    with open(GOLDEN, encoding="utf-8") as f:
        committed = json.load(f)
    fresh = render_all(folder)
    for file, digest in committed["templates"].items():
        if sha256(folder, file) != digest:
            print(f"note: {file} is not the file the golden was made from")
    stale = fresh != committed["cases"] or numbers() != committed["numbers"]
    if stale:
        print("FAIL: the committed golden differs from a fresh rendering: rerun generate")
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "kimi")
        subprocess.run([mla, "make-tiny", "--family", "kimi-k2", "--layers", "1", "--shards", "1",
                        "--out", model], check=True, capture_output=True)
        for i, case in enumerate(fresh):
            got = run_mla(mla, case, model)
            if got != case["text"]:
                bad += 1
                print(f"FAIL case {i} ({case['format']}):\n  want {case['text']!r}\n  got  {got!r}")
    print(f"{len(fresh) - bad} of {len(fresh)} cases equal ({'FAIL' if bad or stale else 'ok'})")
    return 1 if bad or stale else 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "generate":
        generate(sys.argv[2])
        return 0
    if len(sys.argv) == 3 and sys.argv[1] == "live":
        return live(sys.argv[2])
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
