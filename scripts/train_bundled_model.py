#!/usr/bin/env python3
# Trains the bundled default model, models/tiny-kjv: a 6.5M-parameter DeepSeek-V3-architecture
# model (MLA with q / kv LoRA ranks and decoupled RoPE, a dense first layer, then MoE layers with
# one shared and 8 routed experts, sigmoid routing with group-limited top-k and the aux-loss-free
# bias) trained from scratch on the King James Bible, with its own byte-level BPE tokenizer.
#
# The text comes from the Debian package bible-kjv (its `bible` program reads bible-kjv-text's
# data). The KJV's copyright expired long ago (the package's copyright file says so); the text is
# in the public domain. The model learns to write KJV-style English, and to answer a chat turn
# (DeepSeek-V3's <｜User｜> / <｜Assistant｜> format) with the verses that follow the user's.
#
#   sudo apt-get install bible-kjv
#   python3 scripts/train_bundled_model.py [--out models/tiny-kjv] [--steps 1400] [--threads 2]
#
# Needs torch, transformers, tokenizers and safetensors (the versions scripts/lib.sh pins). About
# 25 minutes on 2 cores. Every 20th chapter is held out; the held-out perplexity is written to
# OUT/training.json and quoted in OUT/README.md.
import argparse
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import time

VOCAB = 4096
SEQ = 256
BATCH = 16
SPECIAL = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>", "<｜User｜>", "<｜Assistant｜>"]
BOS, EOS, PAD, USER, ASSISTANT = range(5)

# DeepSeek-V3's pre-tokenizer (digits in runs of up to 3, CJK runs, then words / punctuation /
# whitespace), so the tokenizer is one GGUF names "deepseek-v3" and `mla quantize` can embed it.
WORDS = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|"
         r" ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CJK = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"

# Our own chat template for the DeepSeek-V3 format (system prompts joined after BOS, user and
# assistant turns marked by their tokens, the assistant's closed by EOS).
CHAT_TEMPLATE = (
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
    "{% set ns = namespace(system_prompt='', first=true) %}"
    "{%- for message in messages %}{%- if message['role'] == 'system' %}{%- if ns.first %}"
    "{% set ns.system_prompt = message['content'] %}{% set ns.first = false %}{%- else %}"
    "{% set ns.system_prompt = ns.system_prompt + '\\n\\n' + message['content'] %}{%- endif %}"
    "{%- endif %}{%- endfor %}{{ bos_token }}{{ ns.system_prompt }}"
    "{%- for message in messages %}{%- if message['role'] == 'user' %}"
    "{{ '<｜User｜>' + message['content'] }}{%- elif message['role'] == 'assistant' %}"
    "{{ '<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>' }}{%- endif %}"
    "{%- endfor %}{% if add_generation_prompt %}{{ '<｜Assistant｜>' }}{% endif %}")


def read_kjv():
    """[(heading, [verse, ...])] in canonical order, from `bible`'s plain listing: a heading line
    ("Genesis 1"), then one line per verse ("  1 In the beginning ...")."""
    if not shutil.which("bible"):
        sys.exit("the `bible` program is missing: sudo apt-get install bible-kjv")
    text = subprocess.run(["bible", "-l100000", "gen1:1-rev22:21"], check=True, capture_output=True,
                          text=True).stdout
    chapters = []
    for line in text.splitlines():
        if not line.strip():
            continue
        m = re.match(r"^\s+(\d+) (.*)$", line)
        if m:
            chapters[-1][1].append(m.group(2).strip())
        else:
            chapters.append((line.strip(), []))
    if len(chapters) != 1189 or sum(len(v) for _, v in chapters) != 31102:
        sys.exit(f"unexpected listing: {len(chapters)} chapters (1189 expected)")
    return chapters


def train_tokenizer(texts):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{N}{1,3}"), "isolated"),
        pre_tokenizers.Split(Regex(CJK), "isolated"),
        pre_tokenizers.Split(Regex(WORDS), "isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    assert [tok.token_to_id(s) for s in SPECIAL] == list(range(len(SPECIAL)))
    return tok


def documents(chapters, rng):
    """Plain chapters ("Genesis 1\n\nIn the beginning ...") and chat turns: a user message of one
    verse, the assistant's reply the next one to three verses."""
    plain, chats = [], []
    for heading, verses in chapters:
        plain.append(heading + "\n\n" + " ".join(verses))
        for i in range(0, len(verses) - 1, 2):
            k = rng.randint(1, 3)
            chats.append((verses[i], " ".join(verses[i + 1:i + 1 + k])))
    return plain, chats


def token_stream(tok, plain, chats, rng):
    docs = [[BOS] + tok.encode(p, add_special_tokens=False).ids + [EOS] for p in plain]
    for user, reply in chats:
        docs.append([BOS, USER] + tok.encode(user, add_special_tokens=False).ids + [ASSISTANT] +
                    tok.encode(reply, add_special_tokens=False).ids + [EOS])
    rng.shuffle(docs)
    return [t for d in docs for t in d]


def model_config():
    from transformers import DeepseekV3Config
    return DeepseekV3Config(
        vocab_size=VOCAB, hidden_size=256, intermediate_size=768, moe_intermediate_size=160,
        num_hidden_layers=4, first_k_dense_replace=1, n_routed_experts=8, num_experts_per_tok=2,
        n_shared_experts=1, n_group=4, topk_group=2, routed_scaling_factor=2.5,
        norm_topk_prob=True, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=128,
        kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
        max_position_embeddings=4096, rope_theta=10000.0, rope_scaling=None, rms_norm_eps=1e-6,
        bos_token_id=BOS, eos_token_id=EOS, tie_word_embeddings=False)


def balance_routers(model, gamma):
    """DeepSeek-V3's aux-loss-free balancing: after each step every router's correction bias moves
    by gamma toward under-loaded experts (sign of mean load minus the expert's load)."""
    loads = {}

    def hook(name):
        def fn(module, args, out):
            idx = out[2].flatten()
            loads[name] = loads.get(name, 0) + idx.bincount(minlength=module.num_experts).float()
        return fn

    gates = {n: m for n, m in model.named_modules() if n.endswith("mlp.gate")}
    for n, m in gates.items():
        m.register_forward_hook(hook(n))

    def update():
        import torch
        with torch.no_grad():
            for n, load in loads.items():
                gates[n].e_score_correction_bias += gamma * torch.sign(load.mean() - load)
        stats = {n: (load / load.sum()).tolist() for n, load in loads.items()}
        loads.clear()
        return stats
    return update


def evaluate(model, stream):
    import torch
    model.eval()
    nll, count = 0.0, 0
    with torch.no_grad():
        for s in range(0, len(stream) - 1, SEQ):
            x = torch.tensor(stream[s:s + SEQ + 1])
            if len(x) < 2:
                break
            out = model(input_ids=x[None, :-1])
            lp = torch.log_softmax(out.logits[0].float(), -1)
            nll -= lp.gather(1, x[1:, None]).sum().item()
            count += len(x) - 1
    model.train()
    return nll / count


def config_json(cfg):
    """config.json as DeepSeek-V3's own checkpoints write it (rope_theta and rope_scaling at the
    top level, the MoE and routing keys spelled out), not transformers' newer serialisation."""
    keys = ["vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size",
            "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "n_shared_experts",
            "n_routed_experts", "routed_scaling_factor", "kv_lora_rank", "q_lora_rank",
            "qk_rope_head_dim", "v_head_dim", "qk_nope_head_dim", "n_group", "topk_group",
            "num_experts_per_tok", "first_k_dense_replace", "norm_topk_prob", "hidden_act",
            "max_position_embeddings", "initializer_range", "rms_norm_eps", "attention_bias",
            "attention_dropout", "bos_token_id", "eos_token_id", "tie_word_embeddings"]
    c = {k: getattr(cfg, k) for k in keys}
    c.update(architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3", torch_dtype="bfloat16",
             topk_method="noaux_tc", scoring_func="sigmoid", moe_layer_freq=1, num_nextn_predict_layers=0,
             ep_size=1, pretraining_tp=1, use_cache=True, rope_theta=10000.0, rope_scaling=None)
    return c


def save_checkpoint(model, cfg, tok, out):
    """config.json and model.safetensors in DeepSeek's own layout (per-expert gate / up / down
    tensors, BF16 weights, the F32 router bias), and the tokenizer files."""
    import torch
    from safetensors.torch import save_file
    os.makedirs(out, exist_ok=True)
    tensors = {}
    for name, t in model.state_dict().items():
        t = t.detach().float()
        if name.endswith("mlp.experts.gate_up_proj"):  # [E, 2I, H]: gate rows, then up rows
            base, inter = name[:-len("gate_up_proj")], t.shape[1] // 2
            for e in range(t.shape[0]):
                tensors[f"{base}{e}.gate_proj.weight"] = t[e, :inter]
                tensors[f"{base}{e}.up_proj.weight"] = t[e, inter:]
        elif name.endswith("mlp.experts.down_proj"):  # [E, H, I]
            base = name[:-len("down_proj")]
            for e in range(t.shape[0]):
                tensors[f"{base}{e}.down_proj.weight"] = t[e]
        else:
            tensors[name] = t
    tensors = {n: (t if n.endswith("e_score_correction_bias") else t.to(torch.bfloat16)).contiguous()
               for n, t in tensors.items()}
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config_json(cfg), f, indent=2, sort_keys=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": True, "add_eos_token": False, "bos_token": SPECIAL[BOS],
                   "eos_token": SPECIAL[EOS], "pad_token": SPECIAL[PAD], "model_max_length": 4096,
                   "clean_up_tokenization_spaces": False, "tokenizer_class": "PreTrainedTokenizerFast",
                   "chat_template": CHAT_TEMPLATE}, f, indent=2, ensure_ascii=False)


def reload_check(out, model, sample):
    """The saved directory, loaded by transformers, computes what the trained model computes with
    its weights rounded to BF16 (catches a wrong tensor name or expert split)."""
    import torch
    from transformers import AutoModelForCausalLM
    loaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    ref = {n: t.detach().to(torch.bfloat16).float() for n, t in model.state_dict().items()}
    for n, t in loaded.state_dict().items():
        if not n.endswith("e_score_correction_bias") and not torch.equal(t, ref[n]):
            sys.exit(f"reload: {n} differs from the trained weights")
    x = torch.tensor([sample])
    with torch.no_grad():
        model.eval()
        a = model(input_ids=x).logits
        b = loaded(input_ids=x).logits
        model.train()
    return (a - b).abs().max().item(), loaded


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "models", "tiny-kjv"))
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    import torch
    import transformers
    from transformers import DeepseekV3ForCausalLM
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)

    chapters = read_kjv()
    held = [c for i, c in enumerate(chapters) if i % 20 == 7]
    train = [c for i, c in enumerate(chapters) if i % 20 != 7]
    plain, chats = documents(train, rng)
    tok = train_tokenizer(plain)
    stream = token_stream(tok, plain, chats, rng)
    held_plain, held_chats = documents(held, random.Random(0))
    held_stream = token_stream(tok, held_plain, [], random.Random(0))
    held_bytes = sum(len(p.encode()) for p in held_plain)
    print(f"train: {len(train)} chapters, {len(stream)} tokens; held out: {len(held)} chapters, "
          f"{len(held_stream)} tokens", flush=True)

    cfg = model_config()
    model = DeepseekV3ForCausalLM(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    balance = balance_routers(model, gamma=1e-2)  # V3 used 1e-3 over far more steps
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    warmup = 100

    def lr_at(step):
        if step < warmup:
            return args.lr * (step + 1) / warmup
        p = (step - warmup) / max(1, args.steps - warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))

    t0 = time.time()
    log = []
    for step in range(args.steps):
        starts = [rng.randrange(0, len(stream) - SEQ - 1) for _ in range(BATCH)]
        x = torch.tensor([stream[s:s + SEQ + 1] for s in starts])
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        out = model(input_ids=x, labels=x)  # transformers shifts the labels: SEQ predictions
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        load = balance()
        if step % 50 == 0 or step == args.steps - 1:
            worst = max(max(v) for v in load.values())
            print(f"step {step}: loss {out.loss.item():.3f}, lr {lr_at(step):.2e}, busiest expert "
                  f"{worst:.2f} of routed tokens, {time.time() - t0:.0f} s", flush=True)
            log.append({"step": step, "loss": out.loss.item(), "seconds": time.time() - t0})

    train_seconds = time.time() - t0
    save_checkpoint(model, cfg, tok, args.out)
    err, loaded = reload_check(args.out, model, held_stream[:64])
    nll = evaluate(loaded, held_stream)
    result = {
        "parameters": n_params, "vocab": VOCAB, "train_tokens": len(stream), "steps": args.steps,
        "tokens_per_step": BATCH * SEQ, "train_seconds": round(train_seconds),
        "held_out_chapters": len(held), "held_out_tokens": len(held_stream),
        "held_out_nll_per_token": nll, "held_out_perplexity": math.exp(nll),
        "held_out_bits_per_byte": nll * len(held_stream) / held_bytes / math.log(2),
        "bf16_rounding_max_logit_change": err, "torch": torch.__version__,
        "transformers": transformers.__version__, "log": log,
    }
    with open(os.path.join(args.out, "training.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps({k: v for k, v in result.items() if k != "log"}, indent=2))


if __name__ == "__main__":
    main()
