#!/usr/bin/env python3
"""Helper of bench/peers.sh (mla vs llama.cpp vs ik_llama.cpp); standard library only.

  peers_table.py patch llama.cpp|ik_llama.cpp SRC   apply the peers.sh source patches (idempotent)
  peers_table.py check-model DIR bf16|fp8            the HF directory is what peers.sh expects
  peers_table.py gguf-bytes GGUF_PY_DIR FILE.gguf    active weight bytes read per decoded token
  peers_table.py table RUNS_DIR META.json            the Markdown table of the runs' medians
  peers_table.py best-config RUNS_DIR GROUP          ik_llama.cpp's config with the best decode

RUNS_DIR holds one JSON file per run, named r<round>__<engine>__<config>__<group>.json: `mla bench
model --json` output for engine mla, `llama-bench -o json` output for the peers. Groups: bf16
(prefill PP + decode TG on the BF16 weights), q8 (the same on FP8 for mla, Q8_0 for the peers),
depth (decode TG after DEPTH tokens of context, FP8 / Q8_0). mla runs twice in the bf16 and q8
groups: config `default` (--prompt-len PP: its prefill row) and config `empty` (--prompt-len 1:
its decode row, from an empty context as the peers' tgTG); run directories without `empty` runs
take mla's decode from `default`. Files named p<k>__ENGINE__CONFIG__GROUP.json are back-to-back
decode pairs (mla against ik_llama.cpp, k = 1, 2, ...): the table gives the median of their ratios.
"""

import json
import os
import statistics
import sys
from collections import defaultdict

# ---------------------------------------------------------------------------------------------
# Source patches. Each: (file, old, new, what). `new` carries the marker "peers.sh" so that a
# second run sees the patch applied; `old` must occur exactly once in an unpatched file.

PRE_OLD = ('raise NotImplementedError("BPE pre-tokenizer was not recognized - update '
           'get_vocab_base_pre()")')
# Unknown tokenizer hash: fall back to the pre-tokenizer named by $PEERS_SH_UNKNOWN_PRE (peers.sh
# sets deepseek-v3: the tiny checkpoint's tokenizer.json has DeepSeek-V3's split regexes); without
# that variable the converter raises as before.
PRE_NEW = ('res = os.environ.get("PEERS_SH_UNKNOWN_PRE")  # peers.sh: unknown hash -> '
           '$PEERS_SH_UNKNOWN_PRE\n{indent}if res is None:\n{indent}    ' + PRE_OLD)

PATCHES = {
    "llama.cpp": [
        ("src/models/deepseek2.cpp",
         "ml.get_key(LLM_KV_ATTENTION_Q_LORA_RANK, hparams.n_lora_q);",
         "ml.get_key(LLM_KV_ATTENTION_Q_LORA_RANK, hparams.n_lora_q, false); "
         "// peers.sh: no q_lora_rank key => lite (wq), whatever n_layer",
         "deepseek2 loader: q_lora_rank optional (absent => V2-Lite q_proj), not n_layer == 27"),
        ("conversion/base.py", PRE_OLD, PRE_NEW,
         "converter: unknown pre-tokenizer hash -> $PEERS_SH_UNKNOWN_PRE (deepseek-v3)"),
    ],
    "ik_llama.cpp": [
        ("src/llama-hparams.cpp",
         "ml.get_key(LLM_KV_ATTENTION_Q_LORA_RANK, hparams.n_lora_q);",
         "ml.get_key(LLM_KV_ATTENTION_Q_LORA_RANK, hparams.n_lora_q, false); "
         "// peers.sh: no q_lora_rank key => lite",
         "deepseek2 hparams: q_lora_rank optional (absent => n_lora_q = 0)"),
        ("src/llama-load-tensors.cpp",
         "const bool is_lite = (hparams.n_layer == 27 || hparams.n_layer == 26);",
         "const bool is_lite = (hparams.n_lora_q == 0 /* peers.sh */ || hparams.n_layer == 27 || "
         "hparams.n_layer == 26);",
         "deepseek2 tensors: lite <=> n_lora_q == 0 (or 26/27 layers)"),
        ("src/graphs/build_deepseek2.cpp",
         "bool is_lite = (hparams.n_layer == 27 || hparams.n_layer == 26);",
         "bool is_lite = (hparams.n_lora_q == 0 /* peers.sh */ || hparams.n_layer == 27 || "
         "hparams.n_layer == 26);",
         "deepseek2 graph: lite <=> n_lora_q == 0 (or 26/27 layers)"),
        ("convert_hf_to_gguf.py", PRE_OLD, PRE_NEW,
         "converter: unknown pre-tokenizer hash -> $PEERS_SH_UNKNOWN_PRE (deepseek-v3)"),
    ],
}


def cmd_patch(peer, src):
    if peer not in PATCHES:
        sys.exit(f"peers_table.py patch: unknown peer {peer!r} (llama.cpp or ik_llama.cpp)")
    for rel, old, new, what in PATCHES[peer]:
        path = os.path.join(src, rel)
        try:
            text = open(path, encoding="utf-8").read()
        except OSError as e:
            sys.exit(f"patch {peer}: cannot read {path}: {e}")
        mark = new.format(indent="").split("\n")[0]
        at = [i for i, line in enumerate(text.split("\n")) if mark in line]
        if at:
            print(f"  {peer}: {rel}:{at[0] + 1}: already patched ({what})")
            continue
        lines = text.split("\n")
        hits = [i for i, line in enumerate(lines) if old in line]
        if len(hits) != 1:
            sys.exit(f"patch {peer}: {rel}: expected the text once, found it {len(hits)} times "
                     f"(this version of {peer} differs; adapt PATCHES in {__file__}):\n    {old}")
        i = hits[0]
        indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
        lines[i] = lines[i].replace(old, new.format(indent=indent))
        with open(path + ".peers-tmp", "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
        os.replace(path + ".peers-tmp", path)
        print(f"  {peer}: {rel}:{i + 1}: patched ({what})")


# ---------------------------------------------------------------------------------------------

def cmd_check_model(d, kind):
    try:
        cfg = json.load(open(os.path.join(d, "config.json")))
    except (OSError, ValueError) as e:
        sys.exit(f"{d}: no readable config.json ({e})")
    if cfg.get("model_type") not in ("deepseek_v2", "deepseek_v3"):
        sys.exit(f"{d}: model_type {cfg.get('model_type')!r}, want deepseek_v2 (V2-Lite shape)")
    q = cfg.get("quantization_config") or {}
    if kind == "fp8" and q.get("quant_method") != "fp8":
        sys.exit(f"{d}: config.json has no quantization_config.quant_method \"fp8\" "
                 "(the FP8 argument must be a block-FP8 checkpoint)")
    if kind == "bf16" and q:
        sys.exit(f"{d}: config.json has a quantization_config: the BF16 argument must be BF16")
    print(f"{cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, "
          f"{cfg.get('n_routed_experts')} experts (top {cfg.get('num_experts_per_tok')}), "
          f"q_lora_rank {cfg.get('q_lora_rank')}")


def cmd_gguf_bytes(gguf_py, path):
    """Weight bytes read per decoded token, counted like mla's active_weight_bytes_per_token:
    every tensor except one row of token_embd and, of the routed-expert tensors (*_exps), the
    top-k share (k = expert_used_count of n = expert_count), and of attn_kv_b kept beside
    attn_k_b + attn_v_b only the halves; norms are included (tiny)."""
    sys.path.insert(0, gguf_py)
    import gguf  # the peer's own gguf-py, as its converter uses it

    r = gguf.GGUFReader(path)
    arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")

    def num(key):
        f = r.fields.get(f"{arch}.{key}")
        return int(f.parts[-1][0]) if f is not None else None

    k, n = num("expert_used_count"), num("expert_count")
    names = {t.name for t in r.tensors}
    total = 0.0
    for t in r.tensors:
        b = int(t.n_bytes)
        if t.name.endswith("attn_kv_b.weight") and \
                t.name.replace("attn_kv_b", "attn_k_b") in names:
            continue  # kept beside its split halves k_b, v_b (ik_llama.cpp): counted once
        if t.name == "token_embd.weight":
            b /= int(t.shape[-1])  # one row: shape is (n_embd, n_vocab) in GGUF order
        elif "_exps" in t.name and k and n:
            b = b * k / n
        total += b
    print(int(total))


# ---------------------------------------------------------------------------------------------

ROWS = [  # (label, group, metric)
    ("prefill {pp}, BF16", "bf16", "pp"),
    ("prefill {pp}, FP8 (mla) vs Q8_0", "q8", "pp"),
    ("decode {tg}, BF16", "bf16", "tg"),
    ("decode {tg}, FP8 (mla) vs Q8_0", "q8", "tg"),
    ("decode {tg} at {depth} context, FP8 (mla) vs Q8_0", "depth", "tg"),
]
ENGINES = ["mla", "llama.cpp", "ik_llama.cpp"]


def parse_run(engine, path):
    """{"pp": tokens/s, "tg": tokens/s} of one run, plus extras."""
    data = json.load(open(path))
    out = {}
    if engine == "mla":
        out["pp"] = data.get("prefill_tokens_per_s")
        out["tg"] = data.get("decode_tokens_per_s")
        out["bytes"] = data.get("active_weight_bytes_per_token")
        out["matmul_dtype"] = data.get("matmul_dtype")
        return out
    for t in data:  # llama-bench: one object per test
        if int(t.get("n_gen", 0)) > 0:
            out["tg"] = float(t["avg_ts"])
        elif int(t.get("n_prompt", 0)) > 0:
            out["pp"] = float(t["avg_ts"])
        for key in ("build_commit", "build_number", "cpu_info", "type_k", "flash_attn",
                    "model_type", "model_size", "n_threads"):
            if key in t:
                out.setdefault(key, t[key])
    return out


def spread(ratios):
    """(median, min, max, n) of a list of ratios, or None for none."""
    r = sorted(ratios)
    return (statistics.median(r), r[0], r[-1], len(r)) if r else None


class Runs:
    """The runs of a RUNS_DIR, by round (r<k>) and back-to-back pair (p<k>)."""

    def __init__(self, runs_dir):
        self.samples = defaultdict(dict)  # (engine, config, group, metric) -> {round: tokens/s}
        self.extras = defaultdict(dict)  # (engine, config, group) -> extras of the last run read
        self.per_bw = defaultdict(dict)  # (engine, config, group) -> {round: tg per probe GB/s}
        self.pairs = defaultdict(dict)  # (group, pair) -> {engine: decode tokens/s}
        self.rounds = set()
        for name in sorted(os.listdir(runs_dir)):
            if not name.endswith(".json"):
                continue
            parts = name[:-5].split("__")
            if len(parts) != 4 or parts[0][:1] not in ("r", "p"):
                continue
            rnd, engine, config, group = parts
            try:
                run = parse_run(engine, os.path.join(runs_dir, name))
            except (OSError, ValueError, KeyError, TypeError) as e:
                print(f"warning: {name}: unreadable ({e}); skipped", file=sys.stderr)
                continue
            if rnd.startswith("p"):  # a back-to-back decode pair: tokens/s only
                if run.get("tg"):
                    self.pairs[(group, rnd)][engine] = run["tg"]
                continue
            self.rounds.add(rnd)
            for metric in ("pp", "tg"):
                # mla's `empty` runs (a 1-token prompt) give no prefill figure
                if run.get(metric) and not (engine == "mla" and config == "empty" and metric == "pp"):
                    self.samples[(engine, config, group, metric)][rnd] = run[metric]
            try:  # the read probe peers.sh ran right before this run (GB/s)
                bw = float(open(os.path.join(runs_dir, name[:-5] + ".probe")).read())
            except (OSError, ValueError):
                bw = None
            if bw and run.get("tg"):
                self.per_bw[(engine, config, group)][rnd] = run["tg"] / bw
            self.extras[(engine, config, group)].update(
                {k: v for k, v in run.items() if k not in ("pp", "tg")})
        # mla's decode rows: its empty-context runs where the group has them (the peers' tgTG
        # starts from an empty cache too), else the decode after its PP-token prompt.
        self.empty_groups = {g for (e, c, g, _) in self.samples if e == "mla" and c == "empty"}

    def feeds(self, engine, config, group, metric):
        """Whether the runs of a configuration stand for the engine in a row."""
        return (metric == "pp" or engine != "mla" or config != "default" or
                group not in self.empty_groups)

    def best(self, engine, group, metric):
        """(median tokens/s, config, n) of the engine's best configuration for the row."""
        cands = [(statistics.median(v.values()), c, len(v))
                 for (e, c, g, m), v in self.samples.items()
                 if e == engine and g == group and m == metric and v and self.feeds(e, c, g, m)]
        return max(cands) if cands else (None, None, 0)

    def paired(self, group, metric, config, peer, peer_config):
        """spread() over rounds of mla's / the peer's tokens/s in the same round: the rounds
        rotate the order, and a run is compared with the peer's run minutes (not a whole
        benchmark) away, which the host's moving bandwidth skews less."""
        a = self.samples.get(("mla", config, group, metric), {})
        b = self.samples.get((peer, peer_config, group, metric), {})
        return spread(a[k] / b[k] for k in a.keys() & b.keys())

    def back_to_back(self, group):
        """spread() of mla's / ik_llama.cpp's decode over the group's back-to-back pairs."""
        return spread(v["mla"] / v["ik_llama.cpp"] for (g, _), v in self.pairs.items()
                      if g == group and v.get("mla") and v.get("ik_llama.cpp"))


def fmt_ts(v):
    return "n/a" if v is None else (f"{v:.1f}" if v >= 10 else f"{v:.2f}")


def cmd_table(runs_dir, meta_path):
    meta = json.load(open(meta_path))
    runs = Runs(runs_dir)
    samples, extras, per_bw, best = runs.samples, runs.extras, runs.per_bw, runs.best
    pp, tg, depth = meta["pp"], meta["tg"], meta["depth"]
    # MLA_8BIT=gguf: mla ran llama.cpp's own Q8_0 file in the 8-bit rows.
    eight = "Q8_0, the same GGUF file" if meta.get("mla_8bit") == "gguf" else "FP8 (mla) vs Q8_0"
    rows = [(lbl.replace("FP8 (mla) vs Q8_0", eight), g, mt) for lbl, g, mt in ROWS]
    print(f"### mla vs llama.cpp vs ik_llama.cpp: {meta['threads']} threads, "
          f"median of {len(runs.rounds)} interleaved round{'s' if len(runs.rounds) != 1 else ''} (tokens/s, higher is better)\n")
    print(f"CPU: {meta.get('cpu', '?')}; model: {meta.get('model', '?')}\n")
    print("| row | mla | llama.cpp | ik_llama.cpp (best flags) | mla/llama.cpp | mla/ik_llama.cpp "
          "| mla/ik_llama.cpp per round | back to back |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    ik_names = meta.get("ik_configs", {})
    for label, group, metric in rows:
        m, mc, _ = best("mla", group, metric)
        ll, _, _ = best("llama.cpp", group, metric)
        ik, ikc, _ = best("ik_llama.cpp", group, metric)
        ikcell = fmt_ts(ik) + (f" (`{ik_names.get(ikc, ikc)}`)" if ikc else "")
        r1 = f"{m / ll:.2f}x" if m and ll else "n/a"
        r2 = f"{m / ik:.2f}x" if m and ik else "n/a"
        pr = runs.paired(group, metric, mc, "ik_llama.cpp", ikc) if mc and ikc else None
        r3 = f"{pr[0]:.2f}x [{pr[1]:.2f}-{pr[2]:.2f}]" if pr else "n/a"
        bb = runs.back_to_back(group) if metric == "tg" else None
        r4 = f"{bb[0]:.2f}x [{bb[1]:.2f}-{bb[2]:.2f}] (n={bb[3]})" if bb else "n/a"
        print(f"| {label.format(pp=pp, tg=tg, depth=depth)} | {fmt_ts(m)} | {fmt_ts(ll)} | "
              f"{ikcell} | {r1} | {r2} | {r3} | {r4} |")
    print("\nper round: the median [range] over rounds of mla's tokens/s over ik_llama.cpp's (the "
          "flags above) in the same round, the ratio of medians beside it. back to back: the "
          "median [range] of that ratio over pairs of decode runs started one right after the "
          "other (ABBA order, ik_llama.cpp with the flags of its best decode in the rounds): "
          "the host's read bandwidth moves within seconds, so decode ratios between runs "
          "minutes apart move with it.")

    # Decode normalised by the read probe before each run: the host's bandwidth level changes
    # between runs, this ratio much less (same bytes per token for every engine of a row).
    if per_bw:
        print("\nDecode tokens/s per GB/s of the read probe run right before (`mla bench machine`"
              "), median over rounds, best configuration per engine:\n")
        print("| row | mla | llama.cpp | ik_llama.cpp | mla/llama.cpp | mla/ik_llama.cpp |")
        print("|---|---:|---:|---:|---:|---:|")
        for label, group, metric in rows:
            if metric != "tg":
                continue
            med = {}
            for e in ENGINES:
                c = [statistics.median(v.values()) for (e2, c2, g), v in per_bw.items()
                     if e2 == e and g == group and v and runs.feeds(e2, c2, g, "tg")]
                med[e] = max(c) if c else None
            m, ll, ik = med["mla"], med["llama.cpp"], med["ik_llama.cpp"]
            cell = lambda v: "n/a" if v is None else f"{v:.3f}"
            r1 = f"{m / ll:.2f}x" if m and ll else "n/a"
            r2 = f"{m / ik:.2f}x" if m and ik else "n/a"
            print(f"| {label.format(pp=pp, tg=tg, depth=depth)} | {cell(m)} | {cell(ll)} | "
                  f"{cell(ik)} | {r1} | {r2} |")

    # Every configuration, for the record.
    print("\nAll configurations (median tokens/s over rounds; n = rounds):\n")
    print("| engine | config | " + " | ".join(
        lbl.format(pp=pp, tg=tg, depth=depth) for lbl, _, _ in rows) + " |")
    print("|---|---|" + "---:|" * len(rows))
    configs = sorted({(e, c) for (e, c, _, _) in samples},
                     key=lambda ec: (ENGINES.index(ec[0]) if ec[0] in ENGINES else 9, ec[1]))
    for e, c in configs:
        cells = []
        for _, g, mt in ROWS:
            v = samples.get((e, c, g, mt))
            cells.append(f"{fmt_ts(statistics.median(v.values()))} (n={len(v)})" if v else "n/a")
        name = meta.get("configs", {}).get(f"{e}/{c}", c)
        print(f"| {e} | `{name}` | " + " | ".join(cells) + " |")

    # Bytes per decoded token.
    print("\nWeight bytes read per decoded token (mla: active_weight_bytes_per_token; peers: "
          "the same count over the GGUF's tensors) and the decode rate they imply:\n")
    print("| weights | engine | MB/token | decode tokens/s | GB/s |")
    print("|---|---|---:|---:|---:|")
    byt = meta.get("bytes", {})
    for group, wname in (("bf16", "BF16"),
                         ("q8", "Q8_0" if meta.get("mla_8bit") == "gguf" else "FP8 (mla) / Q8_0")):
        for e in ENGINES:
            b = extras.get(("mla", "default", group), {}).get("bytes") if e == "mla" \
                else byt.get(f"{e}/{group}")
            t, _, _ = best(e, group, "tg")
            gbs = f"{b * t / 1e9:.1f}" if b and t else "n/a"
            mb = f"{b / 1e6:.0f}" if b else "n/a"
            print(f"| {wname} | {e} | {mb} | {fmt_ts(t)} | {gbs} |")
    if meta.get("notes"):
        print()
        for n in meta["notes"]:
            print(f"- {n}")


def cmd_best_config(runs_dir, group):
    """The ik_llama.cpp config (file-name part) with the best median decode of the group's
    rounds, as the table chooses it; nothing when there is none."""
    config = Runs(runs_dir).best("ik_llama.cpp", group, "tg")[1]
    if config:
        print(config)


def main(argv):
    if len(argv) >= 3 and argv[0] == "patch":
        cmd_patch(argv[1], argv[2])
    elif len(argv) == 3 and argv[0] == "check-model":
        cmd_check_model(argv[1], argv[2])
    elif len(argv) == 3 and argv[0] == "gguf-bytes":
        cmd_gguf_bytes(argv[1], argv[2])
    elif len(argv) == 3 and argv[0] == "best-config":
        cmd_best_config(argv[1], argv[2])
    elif len(argv) == 3 and argv[0] == "table":
        cmd_table(argv[1], argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
