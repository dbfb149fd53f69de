#!/usr/bin/env python3
# Model-runtime oracle: Hugging Face transformers goldens of tiny random checkpoints (`mla
# make-tiny`), and the check of `mla generate --dump-activations` against them, with tolerances
# derived from FP32 arithmetic with an FP64 model (docs/ORACLES.md).
#
# Usage:
#   model_oracle.py golden [OUTDIR] [--mla BINARY] [--cases NAME,...]
#       needs torch + transformers; writes OUTDIR/<case>.safetensors (default tests/data/model)
#   model_oracle.py check MLA_BINARY [--golden DIR] [--cases NAME,...] [--no-live]
#       needs numpy only; with torch + transformers importable it also reruns Hugging Face live
#
# Three implementations meet here:
#   HF    transformers' native DeepseekV2ForCausalLM / DeepseekV3ForCausalLM in FP32 (the golden);
#   mla   the engine, FP32 activations, BF16 latent KV cache;
#   FP64  a numpy model of the same maths (docs/MODELS.md) in float64, which also derives
#         the per-element FP32 error bound by Monte Carlo arithmetic (model_fp64.py: the derivation).
# Each FP32 implementation must lie within the bound of the FP64 values, so two of them may differ
# by twice the bound. The HF goldens are checked against the FP64 model when made and
# again on every check, which is what validates the bound: it is never fitted to the engine.
#
# The engine stores the latent cache in BF16 (core/kv_format.h has no FP32 cache), so its attention
# sees bf16(c_kv) and bf16(k_pe). Each golden therefore holds two Hugging Face runs: "fp32" (HF as
# shipped) and "kv_bf16" (the same code with the latent after kv_a_layernorm and the rotated k_pe
# rounded to BF16 before they enter HF's cache, which is what the engine stores). `mla generate`
# runs with --kv-dtype f32 against "fp32" when the engine offers it, and with bf16 against "kv_bf16".
import hashlib
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile

# The FP64 model's small products gain nothing from BLAS threads, and threads oversubscribe a busy
# CI machine badly; set before numpy loads its BLAS.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

try:
    import numpy as np
except ImportError:  # the CTest entry must not fail on a machine without numpy
    np = None
else:  # beside this file
    from flashmla_reference import write_safetensors
    from mpi_launch import built_without_mpi, mpirun
    from model_fp64 import MC_SAMPLES, Checkpoint, mc_forward, read_safetensors

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_GOLDEN_DIR = os.path.join(ROOT, "tests", "data", "model")

# The prompt (20 ids < vocab 320, no BOS/EOS semantics: make-tiny has no tokenizer) and the number
# of greedy tokens; the one-shot forward covers prompt + generated[:-1] = T + N - 1 rows.
PROMPT = [5, 17, 33, 2, 9, 100, 250, 3, 77, 141, 318, 64, 12, 200, 45, 8, 290, 123, 31, 7]
N_NEW = 32


class Case:
    """A make-tiny checkpoint (family, seed, weights), or a committed one (directory, relative to the
    repository, with a prompt text that the engine's tokenizer turns into ids after BOS)."""

    def __init__(self, name, family=None, seed=None, weights=None, directory=None, prompt_text=None):
        self.name, self.family, self.seed, self.weights = name, family, seed, weights
        self.directory, self.prompt_text = directory, prompt_text

    def make_tiny_args(self):
        a = ["--family", self.family, "--seed", str(self.seed)]
        return a + ([f"--{self.weights}"] if self.weights else [])

    def source(self):
        """What made the checkpoint, recorded in the golden: the make-tiny arguments, or the
        directory and a digest of its weights (a retrained model needs a new golden)."""
        if self.directory is None:
            return " ".join(self.make_tiny_args())
        with open(os.path.join(ROOT, self.directory, "model.safetensors"), "rb") as f:
            return f"{self.directory} sha256:{hashlib.sha256(f.read()).hexdigest()[:16]}"

    def checkpoint(self, mla, tmp):
        if self.directory is not None:
            return os.path.join(ROOT, self.directory)
        out = os.path.join(tmp, "ckpt")
        run_make_tiny(mla, self, out)
        return out

    def prompt(self, mla):
        if self.prompt_text is None:
            return PROMPT
        tok = os.path.join(self.checkpoint(mla, None), "tokenizer.json")
        r = subprocess.run([mla, "tokenize", "--tokenizer", tok, "--text", self.prompt_text, "--json"],
                           capture_output=True, text=True, check=True)
        return [0] + json.loads(r.stdout)["ids"]  # BOS is id 0 in the bundled tokenizer


# Seeds: of a scan over 1..24, those whose 32 greedy steps all have FP64 top-2 margins of at least
# 1.5 bounds in both variants and no routing near-tie, the one with the largest BF16-cache margin;
# so every golden compares all 32 steps.
CASES = [
    Case("v2-lite", "v2-lite", 5),
    Case("v2", "v2", 16),
    Case("v3", "v3", 12),  # FP8 E4M3 with 128x128 block scales, as make-tiny writes V3 by default
    Case("v3-bf16", "v3", 21, "bf16"),
    Case("kimi-k2", "kimi-k2", 18),  # FP8
    Case("moonlight", "moonlight", 3),
    Case("minicpm3", "minicpm3", 1),  # dense, NeoX RoPE with LongRoPE factors, muP scalings
    # The bundled default model (trained, scripts/train_bundled_model.py): real text, real routing.
    Case("tiny-kjv", directory="models/tiny-kjv",
         prompt_text="And God said unto Moses, Speak unto the children of Israel, that they"),
]
VARIANTS = ("fp32", "kv_bf16")

# ---------------------------------------------------------------------------------------------
# Hugging Face side (torch + transformers imported only here).


def import_hf():
    try:
        import torch
        import transformers
    except ImportError:
        return None
    torch.set_num_threads(1)  # one summation order: a rerun on the same CPU is bitwise equal
    transformers.logging.set_verbosity_error()  # HfRunner checks the load report itself
    transformers.logging.disable_progress_bar()
    return torch, transformers


def hf_model_dir(ck, tmp):
    """The directory transformers loads: the make-tiny one itself for BF16 checkpoints of a model
    type it knows; else an FP32 copy (FP8 dequantised as Checkpoint does, since transformers' own
    FP8 dequantisation needs accelerate and whole 128-blocks; kimi_k2 written as deepseek_v3, which
    transformers 5.23 does not register)."""
    cfg = ck.config
    if not ck.fp8 and cfg["model_type"] in ("deepseek_v2", "deepseek_v3", "minicpm3"):
        return ck.path, []
    notes = []
    out = os.path.join(tmp, "hf_f32")
    os.makedirs(out, exist_ok=True)
    cfg = dict(cfg)
    if cfg.pop("quantization_config", None) is not None:
        notes.append("FP8 weights dequantised to an FP32 copy (fp32(e4m3 * weight_scale_inv)): "
                     "BF16/FP32-dequantised reference, not the FP8 GEMM path")
    if cfg["model_type"] == "kimi_k2":
        cfg["model_type"] = "deepseek_v3"
        notes.append("model_type kimi_k2 (not registered in transformers) loaded as DeepseekV3Config")
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    tensors = [(n, "F32", a) for n, a in sorted(ck.w.items())]
    write_safetensors(os.path.join(out, "model.safetensors"), tensors, {"format": "pt"})
    return out, notes


class HfRunner:
    def __init__(self, ck, tmp):
        self.torch, self.transformers = import_hf()
        from transformers import AutoModelForCausalLM

        self.ck = ck
        path, self.notes = hf_model_dir(ck, tmp)
        self.model, info = AutoModelForCausalLM.from_pretrained(
            path, dtype=self.torch.float32, attn_implementation="eager", output_loading_info=True)
        self.model.eval()
        bad = [k for k in info["unexpected_keys"] if ck.is_model_tensor(k)]
        if info["missing_keys"] or bad or info["mismatched_keys"] or info["error_msgs"]:
            raise RuntimeError(f"transformers did not load {path} cleanly: {info}")
        self.module = sys.modules[type(self.model).__module__]
        self.verify_weights()

    def verify_weights(self):
        """Every parameter transformers holds equals the checkpoint's value exactly (the v5 loader
        fuses per-expert tensors into experts.gate_up_proj [E, 2·I_e, D] and down_proj)."""
        used = set()
        for name, t in self.model.state_dict().items():
            got = t.detach().cpu().numpy()
            m = re.match(r"(model\.layers\.\d+\.mlp\.experts)\.(gate_up_proj|down_proj)$", name)
            if m:
                E = got.shape[0]
                parts = ["gate_proj", "up_proj"] if m.group(2) == "gate_up_proj" else ["down_proj"]
                names = [[f"{m.group(1)}.{e}.{p}.weight" for p in parts] for e in range(E)]
                want = np.stack([np.concatenate([self.ck.w[n] for n in ns]) for ns in names])
                used.update(n for ns in names for n in ns)
            else:
                want = self.ck.w[name]
                used.add(name)
            if want.shape != got.shape or not np.array_equal(want, got):
                raise RuntimeError(f"transformers holds {name} {got.shape} unlike the checkpoint {want.shape}")
        missed = [n for n in self.ck.w if self.ck.is_model_tensor(n) and n not in used]
        if missed:
            raise RuntimeError(f"transformers did not use {missed[:5]}")

    def bf16_patches(self):
        """Round what the engine's BF16 cache stores: the latent after kv_a_layernorm, and k_pe
        after RoPE (HF rotates k in its de-interleaved order; rounding is elementwise). Returns the
        function that removes the patches."""
        torch, mod = self.torch, self.module

        def r16(t):
            return t.to(torch.bfloat16).to(torch.float32)

        def rounding_k(f):
            def wrapped(q, k, *args, **kwargs):
                q_out, k_out = f(q, k, *args, **kwargs)
                return q_out, r16(k_out)
            return wrapped

        hooks = [layer.self_attn.kv_a_layernorm.register_forward_hook(lambda m, a, o: r16(o))
                 for layer in self.model.model.layers]
        saved = {}
        for name in ("apply_rotary_emb", "apply_rotary_pos_emb_interleave", "apply_rotary_pos_emb"):
            if hasattr(mod, name):  # looked up in the module at call time
                saved[name] = getattr(mod, name)
                setattr(mod, name, rounding_k(saved[name]))

        def undo():
            for h in hooks:
                h.remove()
            for name, f in saved.items():
                setattr(mod, name, f)
        return undo

    def run(self, prompt, n_new, kv_bf16):
        """Greedy tokens from HF's own incremental decode (DynamicCache), the one-shot logits of
        prompt + generated[:-1], the hidden states after each decoder layer (before the final norm)
        for those rows, and the incremental decode logits."""
        torch = self.torch
        undo = self.bf16_patches() if kv_bf16 else (lambda: None)
        try:
            with torch.no_grad():
                out = self.model(torch.tensor([prompt]), use_cache=True)
                past, last = out.past_key_values, out.logits[0, -1]
                gen, inc = [], []
                for i in range(n_new):
                    gen.append(int(torch.argmax(last)))
                    if i == n_new - 1:
                        break
                    out = self.model(torch.tensor([[gen[-1]]]), past_key_values=past, use_cache=True)
                    past, last = out.past_key_values, out.logits[0, -1]
                    inc.append(last.numpy().copy())
                captured = {}
                def keep(i):
                    def hook(module, args, out):
                        captured[i] = (out[0] if isinstance(out, tuple) else out)[0].numpy().copy()
                    return hook

                hooks = [layer.register_forward_hook(keep(i)) for i, layer in enumerate(self.model.model.layers)]
                try:
                    full = self.model(torch.tensor([prompt + gen[:-1]]), use_cache=False)
                finally:
                    for h in hooks:
                        h.remove()
        finally:
            undo()
        return {"generated": np.array(gen, dtype=np.int32), "logits": full.logits[0].numpy().copy(),
                "hidden": [captured[i] for i in range(len(captured))], "incremental": np.array(inc)}


# ---------------------------------------------------------------------------------------------
# Comparisons.


class Report:
    def __init__(self, case):
        self.case, self.rows, self.failed = case, [], False

    def add(self, what, err=None, bound=None, ok=None, note=""):
        """ok: True PASS, False FAIL, None information (never fails)."""
        self.rows.append((what, err, bound, ok, note))
        self.failed |= ok is False

    def print(self):
        print(f"\n== {self.case}")
        head = "comparison (at the element of largest err/bound)"
        print(f"  {head:<58} {'err':>9} {'bound':>9} {'err/bnd':>7}  result")
        for what, err, bound, ok, note in self.rows:
            e = "" if err is None else f"{err:9.3g}"
            b = "" if bound is None else f"{bound:9.3g}"
            r = "" if err is None or bound is None else f"{err / bound if bound > 0 else math.inf:7.3f}"
            res = {True: "PASS", False: "FAIL", None: "info"}[ok]
            print(f"  {what:<58} {e:>9} {b:>9} {r:>7}  {res}{'  ' + note if note else ''}")


def within(a, b, bound):
    """(|a − b|, bound) at the element where |a − b| / bound is largest, and whether it is <= 1."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape or not np.all(np.isfinite(a)) or not np.all(np.isfinite(b)):
        return math.inf, 0.0, False
    err = np.abs(a - b)
    ratio = err / bound
    i = np.unravel_index(np.argmax(ratio), ratio.shape)
    return float(err[i]), float(bound[i]), bool(ratio[i] <= 1.0)


class Exact:
    """The FP64 model on one token sequence (prompt + a run's generated[:-1]): values, bounds, and
    the first row at which a routing choice is a near-tie (rows from there on are not failed)."""

    def __init__(self, ck, seq, kv_bf16, products_bf16=False, attention_bf16=False):
        hidden, (self.logits, self.bound), self.flips = mc_forward(
            ck, seq, kv_bf16=kv_bf16, products_bf16=products_bf16, attention_bf16=attention_bf16)
        self.hidden = [h for h, _ in hidden]
        self.hbound = [b for _, b in hidden]
        self.first_tie = min([t for (_, t) in self.flips], default=len(seq))


def greedy_agreement(ref_tokens, got_tokens, ex, T):
    """Greedy tokens step by step. A different token at step k is a near-tie, not a failure, when
    the implementation could rank it first: FP64 margin ≤ the sum of the two logits' bounds.
    Returns (steps identical, note, ok)."""
    for k, (g, m) in enumerate(zip(ref_tokens, got_tokens)):
        if g == m:
            continue
        row, b = ex.logits[T - 1 + k], ex.bound[T - 1 + k]
        margin, bb = row[g] - row[m], b[g] + b[m]
        if margin <= bb or T - 1 + k >= ex.first_tie:
            return k, f"near-tie at step {k}: {m} vs {g}, FP64 margin {margin:.3g}, bound {bb:.3g}", None
        return k, f"step {k}: {m} instead of {g}, FP64 margin {margin:.3g} > bound {bb:.3g}", False
    if len(ref_tokens) != len(got_tokens):
        return min(len(ref_tokens), len(got_tokens)), f"{len(got_tokens)} tokens, expected {len(ref_tokens)}", False
    return len(ref_tokens), "", True


def compare_run(rep, label, run, ref, ex, T, factor):
    """run, ref: {generated [N], logits [rows, V] (prompt rows then decode rows), hidden [L][≥T, D]}
    on the sequence `ex` was computed for; each value within factor·bound of the other (factor 2:
    two FP32 implementations, each within its bound of the exact values)."""
    n_ok, note, ok = greedy_agreement(ref["generated"], run["generated"], ex, T)
    rep.add(f"{label}: greedy tokens, {n_ok}/{len(ref['generated'])} identical", ok=ok, note=note)
    # Decode row T + j was computed after feeding generated[j]: comparable while the tokens agree.
    for name, rows in (("prompt logits", range(0, T)), ("decode logits", range(T, T + n_ok))):
        rows = [i for i in rows if i < min(run["logits"].shape[0], ref["logits"].shape[0])]
        if rows:
            e, b, good = within(run["logits"][rows], ref["logits"][rows], factor * ex.bound[rows])
            rep.add(f"{label}: {name} ({len(rows)} rows)", e, b, good if rows[-1] < ex.first_tie else None)
    if len(run["hidden"]) != len(ref["hidden"]):
        rep.add(f"{label}: {len(run['hidden'])} hidden states, expected {len(ref['hidden'])}", ok=False)
        return
    res = [within(g[:T], r[:T], factor * b[:T]) for g, r, b in zip(run["hidden"], ref["hidden"], ex.hbound)]
    for l, (e, b, good) in enumerate(res):
        if not good:
            rep.add(f"{label}: hidden.{l} (prompt rows)", e, b, False if ex.first_tie >= T else None)
    if all(g for _, _, g in res):
        l = max(range(len(res)), key=lambda i: res[i][0] / res[i][1])
        rep.add(f"{label}: hidden.0-{len(res) - 1} (prompt rows; worst .{l})", res[l][0], res[l][1], True)


# ---------------------------------------------------------------------------------------------
# golden


def run_make_tiny(mla, case, out):
    r = subprocess.run([mla, "make-tiny", *case.make_tiny_args(), "--out", out], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"mla make-tiny {' '.join(case.make_tiny_args())} failed: {(r.stderr or r.stdout).strip()}")


def reference_for(ck):
    cls = {"deepseek_v2": "DeepseekV2ForCausalLM (models.deepseek_v2)",
           "minicpm3": "MiniCPM3ForCausalLM (models.minicpm3)"}.get(
        ck.config["model_type"], "DeepseekV3ForCausalLM (models.deepseek_v3)")
    return f"transformers native {cls}, FP32, eager attention"


def drift_notes(ck):
    """What of the reference drift (docs/MODELS.md §Reference drift) this checkpoint touches."""
    c, notes = ck.config, []
    if c["model_type"] == "minicpm3":
        return minicpm3_notes(c)
    if c.get("rope_scaling"):
        notes.append("YaRN softmax factor m^2 applied by transformers (yarn_apply_mscale, V2 and V3) as in the "
                     "remote code; cos/sin factor mscale/mscale_all_dim = 1")
    else:
        notes.append("no rope_scaling: plain RoPE, scale d_qk^-0.5")
    notes.append(f"moe_layer_freq ignored by transformers; the config has {c.get('moe_layer_freq')}, so the "
                 "remote code's rule gives the same layers")
    if c["topk_method"] == "noaux_tc" and int(c.get("n_group") or 1) > 1:
        notes.append(f"noaux_tc with n_group {c['n_group']}: dropped groups masked with -inf (transformers 5.23, "
                     "DeepSeek since Feb 2025); the original remote code used 0.0")
    elif c["topk_method"] == "noaux_tc":
        notes.append("noaux_tc with n_group 1: group masking is a no-op")
    if c["topk_method"] == "group_limited_greedy":
        notes.append("group_limited_greedy: group score = max; dropped groups masked with 0.0, the same as -inf "
                     "for softmax scores >= 0")
    if c["model_type"] == "deepseek_v2":
        notes.append(f"the DeepseekV2 router ignores norm_topk_prob and always scales; the config has "
                     f"norm_topk_prob {str(c.get('norm_topk_prob')).lower()}, for which the remote code does the same")
    if float(c["rms_norm_eps"]) != 1e-6:
        notes.append(f"q_a/kv_a latent norms use eps 1e-6, not rms_norm_eps {c['rms_norm_eps']} (transformers "
                     "and the remote code; vLLM uses rms_norm_eps)")
    else:
        notes.append("q_a/kv_a latent norms use eps 1e-6, equal to rms_norm_eps here")
    if c["model_type"] != "deepseek_v2":
        notes.append("rope_interleave true (default): the interleaved checkpoint layout rotated on the fly")
    if int(c.get("num_nextn_predict_layers") or 0):
        notes.append("MTP layer model.layers.L.* in the file: unexpected keys for transformers, ignored")
    return notes


def minicpm3_notes(c):
    """docs/MODELS.md §MiniCPM3: what transformers' native class does that the hub
    remote code may do differently."""
    notes = ["NeoX (rotate-half) RoPE on the checkpoint layout, no interleave permutation (both)",
             f"longrope: short factors below original_max_position_embeddings "
             f"({c['rope_scaling']['original_max_position_embeddings']}), cos/sin factor "
             "sqrt(1 + ln(factor)/ln(orig)) = 1 at factor 1; transformers switches to the long factors by the "
             "current sequence length, the engine by its context size",
             f"scale_emb {c['scale_emb']}, residual branches x scale_depth/sqrt(L) = {c['scale_depth']}/sqrt("
             f"{c['num_hidden_layers']}), final hidden / (hidden_size/dim_model_base) = "
             f"{c['hidden_size']}/{c['dim_model_base']} (both)",
             "v_head_dim absent: hidden_size / num_attention_heads (both)",
             "q_a/kv_a latent norms use eps 1e-6 (DeepseekV2Attention's default; the remote code the same), "
             f"not rms_norm_eps {c['rms_norm_eps']}",
             "RMSNorm: transformers' Llama norm in FP32 here; the remote code casts only the variance to "
             "FP32 (the same at FP32 activations)"]
    return notes


def sensitivity(ck, seq, base, kv_bf16):
    """How far each reference-drift switch moves the FP64 logits, in units of the FP32 bound: which
    differences this golden can tell apart (ratio > 1) and which it cannot."""
    switches = {"without YaRN m^2": {"m2": False},
                "latent norms with rms_norm_eps": {"latent_eps": float(ck.config["rms_norm_eps"])}}
    rs = ck.config.get("rope_scaling") or {}
    if not rs or (rs.get("rope_type") or rs.get("type")) == "longrope":
        del switches["without YaRN m^2"]
    if ck.config["model_type"] == "minicpm3":
        switches["interleaved RoPE pairs (DeepSeek's layout)"] = {"neox": False}
    if ck.config.get("topk_method") == "noaux_tc" and int(ck.config.get("n_group") or 1) > 1:
        switches["dropped groups masked with 0.0"] = {"group_mask": 0.0}
    out = {}
    for name, kw in switches.items():
        _, (lg, _), _ = mc_forward(ck, seq, samples=0, kv_bf16=kv_bf16, **kw)
        d = np.abs(lg - base.logits)
        out[name] = {"max_abs_logit_change": round(float(d.max()), 9),
                     "max_change_over_bound": round(float((d / base.bound).max()), 4),
                     "greedy_changes": bool(np.any(np.argmax(lg, -1) != np.argmax(base.logits, -1)))}
    return out


def golden_case(case, mla, torch, transformers):
    with tempfile.TemporaryDirectory(prefix="mla-oracle-") as tmp:
        ck = Checkpoint(case.checkpoint(mla, tmp))
        prompt = case.prompt(mla)
        runner = HfRunner(ck, tmp)
        T = len(prompt)
        tensors, info = [("tokens", "I32", np.array(prompt, np.int32))], {}
        for var in VARIANTS:
            res = runner.run(prompt, N_NEW, kv_bf16=(var == "kv_bf16"))
            ex = Exact(ck, prompt + res["generated"][:-1].tolist(), var == "kv_bf16")
            e, b, ok = within(res["logits"], ex.logits, ex.bound)
            eh = [within(h[:T], x[:T], hb[:T]) for h, x, hb in zip(res["hidden"], ex.hidden, ex.hbound)]
            ei = within(res["incremental"], res["logits"][T:], 2 * ex.bound[T:])
            if not (ok and all(x[2] for x in eh) and ei[2]):
                raise RuntimeError(f"{case.name}/{var}: transformers is further from the FP64 model than the FP32 "
                                   f"bound (logits {e:.3g}/{b:.3g}, hidden {eh}, incremental {ei})")
            if np.any(np.argmax(res["logits"][T - 1 :], -1) != res["generated"]):
                raise RuntimeError(f"{case.name}/{var}: HF's one-shot argmax differs from its incremental tokens")
            margins = []
            for k in range(N_NEW):
                row, bb = ex.logits[T - 1 + k], ex.bound[T - 1 + k]
                i, j = np.argsort(-row)[:2]
                margins.append((row[i] - row[j]) / (bb[i] + bb[j]))
            info[var] = {"hf_vs_fp64_logits_err_over_bound": round(e / b, 4),
                         "hf_vs_fp64_hidden_err_over_bound": round(max(x[0] / x[1] for x in eh), 4),
                         "logit_bound_max": float(ex.bound.max()),
                         "hf_incremental_vs_oneshot_max_abs": ei[0],
                         "greedy_min_margin_over_bound": round(float(min(margins)), 2),
                         "routing_near_ties": [list(k) for k in sorted(ex.flips)],
                         "sensitivity": sensitivity(ck, prompt + res["generated"][:-1].tolist(), ex, var == "kv_bf16")}
            tensors.append((f"{var}.generated", "I32", res["generated"]))
            tensors.append((f"{var}.logits", "F32", res["logits"]))
            tensors += [(f"{var}.hidden.{l}", "F32", h[:T]) for l, h in enumerate(res["hidden"])]
        meta = {
            "case": case.name,
            "make_tiny_args": case.source(),
            "reference": reference_for(ck),
            "weights": ("FP8 E4M3 dequantised to FP32 as fp32(e4m3 * weight_scale_inv): BF16/FP32-dequantised "
                        "reference, not the FP8 GEMM path") if ck.fp8 else "BF16, widened exactly to FP32",
            "loading": "; ".join(runner.notes) or "from_pretrained on the make-tiny directory",
            "variants": "fp32: transformers as shipped; kv_bf16: the same with the latent after kv_a_layernorm "
                        "and the rotated k_pe rounded to BF16 before the cache (what the engine's BF16 cache stores)",
            "rows": "logits: one-shot forward of prompt + generated[:-1], row i predicts token i + 1; "
                    "hidden.{l}: residual stream after decoder layer l, prompt rows",
            "depends_on": json.dumps(drift_notes(ck)),
            "checks": json.dumps(info),
            "prompt": ",".join(map(str, prompt)), "n_new": str(N_NEW),
            "transformers": transformers.__version__, "torch": torch.__version__,
            "numpy": np.__version__, "python": platform.python_version(),
        }
        return tensors, meta, info


def golden(outdir, mla, names):
    hf = import_hf()
    if hf is None:
        print("error: golden needs torch and transformers (pip install torch==2.15.0 transformers==5.23.0)",
              file=sys.stderr)
        return 1
    os.makedirs(outdir, exist_ok=True)
    for case in [c for c in CASES if not names or c.name in names]:
        tensors, meta, info = golden_case(case, mla, *hf)
        path = os.path.join(outdir, case.name + ".safetensors")
        write_safetensors(path, tensors, meta)
        print(f"wrote {path}\n  {json.dumps(info)}")
    return 0


# ---------------------------------------------------------------------------------------------
# check


def load_golden(path):
    t, meta = read_safetensors(path)
    L = len([k for k in t if k.startswith("kv_bf16.hidden.")])
    g = {var: {"generated": t[f"{var}.generated"], "logits": t[f"{var}.logits"],
               "hidden": [t[f"{var}.hidden.{l}"] for l in range(L)]} for var in VARIANTS}
    return t["tokens"].tolist(), g, meta


def run_mla(mla, ckpt, prompt, out, kv, extra=(), launcher=None):
    prefix, env = launcher or ([], None)
    cmd = [*prefix, mla, "generate", "-m", ckpt, "--tokens", ",".join(map(str, prompt)), "-n", str(N_NEW),
           "--temperature", "0", "--ignore-eos", "--kv-dtype", kv, "--dump-activations", out, *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if r.returncode != 0:
        text = r.stderr or r.stdout
        if launcher and built_without_mpi(text):  # mpirun's own report follows the line
            return None, "this mla was built without MPI"
        return None, f"exit {r.returncode}: {text.strip()[-300:]}"
    t, _ = read_safetensors(os.path.join(out, "activations.safetensors"))
    missing = [k for k in ("tokens", "logits", "generated", "decode_logits", "hidden.0") if k not in t]
    if missing:
        return None, f"activations.safetensors lacks {missing}"
    if t["tokens"].tolist() != list(prompt):
        return None, "the dump's tokens are not the prompt"
    L = len([k for k in t if k.startswith("hidden.")])
    logits = np.concatenate([t["logits"], t["decode_logits"].reshape(-1, t["logits"].shape[1])])
    return {"generated": t["generated"], "logits": logits, "hidden": [t[f"hidden.{l}"] for l in range(L)]}, None


def generate_available(mla):
    r = subprocess.run([mla, "generate", "--help"], capture_output=True, text=True)
    return r.returncode == 0 and "--dump-activations" in r.stdout


def check_case(case, mla, golden_dir, hf, have_generate):
    rep = Report(case.name)
    path = os.path.join(golden_dir, case.name + ".safetensors")
    if not os.path.exists(path):
        rep.add(f"golden {path} missing", ok=False)
        return rep
    prompt, gold, meta = load_golden(path)
    if meta.get("make_tiny_args") != case.source():
        rep.add("golden made from another checkpoint (regenerate: model_oracle.py golden)", ok=False,
                note=meta.get("make_tiny_args", ""))
    T = len(prompt)
    with tempfile.TemporaryDirectory(prefix="mla-oracle-") as tmp:
        try:
            ckdir = case.checkpoint(mla, tmp)
        except RuntimeError as e:
            rep.add("make-tiny failed", ok=False, note=str(e)[-200:])
            return rep
        ck = Checkpoint(ckdir)
        exact = {}
        # The golden against the FP64 model on this make-tiny's weights: a failure means the
        # checkpoint generator changed (regenerate: model_oracle.py golden) or the model is wrong.
        stale = "if make-tiny changed, regenerate: model_oracle.py golden"
        for var in VARIANTS:
            ex = exact[var] = Exact(ck, prompt + gold[var]["generated"][:-1].tolist(), var == "kv_bf16")
            e, b, ok = within(gold[var]["logits"], ex.logits, ex.bound)
            rep.add(f"HF golden [{var}] vs FP64 model: logits", e, b, ok, "" if ok else stale)
            res = [within(g, x[:T], b[:T]) + (l,)
                   for l, (g, x, b) in enumerate(zip(gold[var]["hidden"], ex.hidden, ex.hbound))]
            worst = max(res, key=lambda w: (not w[2], w[0] / w[1]))
            rep.add(f"HF golden [{var}] vs FP64 model: hidden (worst .{worst[3]})", *worst[:3],
                    "" if worst[2] else stale)
            for (l, t), n in sorted(ex.flips.items()):
                rep.add(f"[{var}] routing near-tie: layer {l}, token {t}",
                        note=f"{n}/{MC_SAMPLES} copies chose other experts")
        # The engine's cache: FP32 when it offers one (then the tight "fp32" golden applies), and
        # BF16, compared with the "kv_bf16" golden, whose bound covers BF16 rounding flips.
        runs, kv_of = {}, {}
        if not have_generate:
            rep.add("`mla generate --dump-activations` is not in this binary", ok=False)
        else:
            # FP32 products and attention against the FP32-derived bounds; the engine's defaults
            # (BF16 products and BF16 attention) against the bound that adds their roundings.
            f32 = ["--matmul-dtype", "f32", "--attention-dtype", "f32"]
            plan = [("mla cpu", "f32", f32), ("mla cpu", "bf16", f32),
                    ("mla --backend ref", None, ["--backend", "ref"] + f32),
                    ("mla --prefill-path absorbed", None, ["--prefill-path", "absorbed"] + f32)]
            primary = "f32"
            for label, kv, extra in plan:
                kv = kv or primary
                run, err = run_mla(mla, ckdir, prompt, os.path.join(tmp, f"dump{len(runs)}"), kv, extra)
                if run is None and kv == "f32" and "dtype" in err:
                    primary = "bf16"
                    rep.add("mla --kv-dtype f32 not supported: FP32-cache comparisons skipped", note=err[-120:])
                    continue
                name = f"{label} [kv {kv}]"
                if run is None:
                    rep.add(f"{name}: generate failed", ok=False, note=err)
                    continue
                runs[name], kv_of[name] = run, kv
                var = "fp32" if kv == "f32" else "kv_bf16"
                compare_run(rep, f"{name} vs HF golden", run, gold[var], exact[var], T, 2)
            base = f"mla cpu [kv {primary}]"
            for name in list(runs):
                if name != base and kv_of[name] == primary and base in runs:
                    var = "fp32" if primary == "f32" else "kv_bf16"
                    compare_run(rep, f"{name} vs {base}", runs[name], runs[base], exact[var], T, 2)
            # The model split over 2 ranks (docs/ARCHITECTURE.md §Ranks), its experts whole per
            # rank and sliced by width: o_proj, the FFN and the experts summed in another FP32
            # order (per rank, then across ranks), so within 2x the FP32 bound of the one-rank
            # run, as any two FP32 implementations.
            launcher = mpirun(2)
            if launcher is None:
                rep.add("mla 2 ranks: skipped", note="mpirun not found (Debian: openmpi-bin)")
            elif base in runs:
                for split in ("experts", "width"):
                    run, err = run_mla(mla, ckdir, prompt, os.path.join(tmp, "dump_ranks_" + split),
                                       primary, f32 + ["--threads", "1", "--moe-split", split],
                                       launcher)
                    if run is None and built_without_mpi(err):
                        rep.add("mla 2 ranks: skipped", note="this mla was built without MPI")
                        break
                    label = f"mla 2 ranks --moe-split {split} [kv {primary}]"
                    if run is None:
                        rep.add(f"{label}: generate failed", ok=False, note=err)
                        continue
                    var = "fp32" if primary == "f32" else "kv_bf16"
                    compare_run(rep, f"{label} vs {base}", run, runs[base], exact[var], T, 2)
            # The defaults on both attention paths: the prompt decompressed (a fresh prompt's path:
            # K and V up-projected on BF16 dot products, the BF16 tiles), and absorbed
            # (--prefill-path absorbed: the BF16 query at the decode kernels).
            bf16 = ["--matmul-dtype", "bf16", "--attention-dtype", "bf16"]
            ex = None
            for suffix, extra in (("", []), (", absorbed", ["--prefill-path", "absorbed"])):
                name = f"mla cpu defaults [kv bf16, products bf16, attention bf16{suffix}]"
                run, err = run_mla(mla, ckdir, prompt,
                                   os.path.join(tmp, f"dump_defaults{len(extra)}"), "bf16",
                                   bf16 + extra)
                if run is None:
                    rep.add(f"{name}: generate failed", ok=False, note=err)
                    continue
                if ex is None:
                    ex = Exact(ck, prompt + gold["kv_bf16"]["generated"][:-1].tolist(), True,
                               products_bf16=True, attention_bf16=True)
                    for (l, t), n in sorted(ex.flips.items()):
                        rep.add(f"[defaults] routing near-tie: layer {l}, token {t}",
                                note=f"{n}/{MC_SAMPLES} copies chose other experts")
                compare_run(rep, f"{name} vs HF golden", run, gold["kv_bf16"], ex, T, 2)
        if hf is not None:
            runner = HfRunner(ck, tmp)
            for var in VARIANTS:
                live = runner.run(prompt, N_NEW, kv_bf16=(var == "kv_bf16"))
                same = (np.array_equal(live["generated"], gold[var]["generated"])
                        and np.array_equal(live["logits"], gold[var]["logits"])
                        and all(np.array_equal(a[:T], b) for a, b in zip(live["hidden"], gold[var]["hidden"])))
                compare_run(rep, f"live HF [{var}] vs golden" + (" (bitwise equal)" if same else ""),
                            live, gold[var], exact[var], T, 2)
                mine = f"mla cpu [kv {'f32' if var == 'fp32' else 'bf16'}]"
                if mine in runs:
                    compare_run(rep, f"{mine} vs live HF [{var}]", runs[mine], live, exact[var], T, 2)
    return rep


def check(mla, golden_dir, names, live):
    hf = import_hf() if live else None
    if live and hf is None:
        print("note: torch / transformers not importable: the live Hugging Face comparisons are skipped")
    have_generate = generate_available(mla)
    failed = False
    for case in [c for c in CASES if not names or c.name in names]:
        rep = check_case(case, mla, golden_dir, hf, have_generate)
        rep.print()
        failed |= rep.failed
    print("\nmodel_oracle: " + ("FAIL" if failed else "PASS"))
    return 1 if failed else 0


def main(argv):
    usage = ("usage: model_oracle.py golden [OUTDIR] [--mla BINARY] [--cases A,B] | "
             "check MLA_BINARY [--golden DIR] [--cases A,B] [--no-live]")
    if np is None:
        print("skipped: numpy not installed (pip install numpy==2.2.6)")
        return 0
    if len(argv) < 2 or argv[1] not in ("golden", "check"):
        print(usage, file=sys.stderr)
        return 2
    cmd, args = argv[1], argv[2:]
    opts, pos = {}, []
    i = 0
    while i < len(args):
        if args[i] in ("--mla", "--golden", "--cases") and i + 1 < len(args):
            opts[args[i]] = args[i + 1]
            i += 2
        elif args[i] == "--no-live":
            opts["--no-live"] = True
            i += 1
        else:
            pos.append(args[i])
            i += 1
    names = set(opts["--cases"].split(",")) if "--cases" in opts else set()
    unknown = names - {c.name for c in CASES}
    if unknown:
        print(f"unknown cases {sorted(unknown)}; have {[c.name for c in CASES]}", file=sys.stderr)
        return 2
    if cmd == "golden" and len(pos) <= 1:
        mla = opts.get("--mla") or os.environ.get("MLA_BINARY") or os.path.join(ROOT, "build", "release", "bin", "mla")
        return golden(pos[0] if pos else DEFAULT_GOLDEN_DIR, mla, names)
    if cmd == "check" and len(pos) == 1:
        return check(pos[0], opts.get("--golden", DEFAULT_GOLDEN_DIR), names, not opts.get("--no-live"))
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
