# The DeepSeek-family forward pass (docs/MODELS.md) in float64 numpy, and the per-element
# FP32 error bound derived from it by Monte Carlo arithmetic: the exact values and tolerances of
# tests/e2e/model_oracle.py. Also reads make-tiny checkpoints (BF16, F8_E4M3 + weight_scale_inv).
# Not a runtime: no cache, every call recomputes all rows.
import json
import math
import os
import re
import struct

import numpy as np

# ---------------------------------------------------------------------------------------------
# safetensors reading (BF16 widened exactly, F8_E4M3 decoded per docs/MODELS.md §Safetensors and
# FP8).

_NP = {"F32": "<f4", "F64": "<f8", "I32": "<i4", "I64": "<i8", "U8": "u1"}


def e4m3_table():
    t = np.zeros(256, dtype=np.float64)
    for byte in range(256):
        s, e, m = byte >> 7, (byte >> 3) & 15, byte & 7
        if e == 0:
            v = 2.0**-6 * m / 8
        elif e == 15 and m == 7:
            v = math.nan
        else:
            v = 2.0 ** (e - 7) * (1 + m / 8)
        t[byte] = -v if s else v
    return t


def read_safetensors(path, dtypes=None):
    """{name: array} with BF16 widened to float32 and F8_E4M3 decoded to float32; metadata.
    `dtypes`, when given, receives each tensor's file dtype."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n].decode("utf-8"))
    data = memoryview(blob)[8 + n :]
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        raw, dt, shape = bytes(data[b:e]), info["dtype"], tuple(info["shape"])
        if dtypes is not None:
            dtypes[name] = dt
        if dt == "BF16":
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif dt == "F8_E4M3":
            a = e4m3_table()[np.frombuffer(raw, "u1")].astype(np.float32)  # exact in FP32
        elif dt in _NP:
            a = np.frombuffer(raw, _NP[dt]).copy()
        else:
            raise ValueError(f"{path}: tensor {name!r} has dtype {dt}, which this reader does not handle")
        out[name] = a.reshape(shape)
    return out, meta


class Checkpoint:
    """A make-tiny directory: config and every weight as the FP32 value all implementations use
    (BF16 widened exactly; FP8 dequantised as the FP32 product e4m3 · weight_scale_inv)."""

    def __init__(self, path):
        self.path = path
        with open(os.path.join(path, "config.json")) as f:
            self.config = json.load(f)
        index = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        else:
            files = ["model.safetensors"]
        raw, self.dtypes = {}, {}
        for fn in files:
            raw.update(read_safetensors(os.path.join(path, fn), self.dtypes)[0])
        self.fp8 = any(d == "F8_E4M3" for d in self.dtypes.values())
        self.w = {}
        for name, a in raw.items():
            if name.endswith("_scale_inv"):
                continue
            if self.dtypes[name] == "F8_E4M3":
                s = raw[name + "_scale_inv"]
                bi = np.minimum(np.arange(a.shape[0]) // 128, s.shape[0] - 1)
                bj = np.minimum(np.arange(a.shape[1]) // 128, s.shape[1] - 1)
                a = (a * s[bi][:, bj]).astype(np.float32)  # one FP32 multiply, round to nearest
            self.w[name] = a.astype(np.float32)

    def num_layers(self):
        return int(self.config["num_hidden_layers"])

    def is_model_tensor(self, name):
        """False for what a plain forward ignores: MTP layers (index >= L) and K2's inv_freq."""
        m = re.match(r"model\.layers\.(\d+)\.", name)
        if m and int(m.group(1)) >= self.num_layers():
            return False
        return not name.endswith("rotary_emb.inv_freq")


# ---------------------------------------------------------------------------------------------
# The FP64 model and the FP32 error bound (Monte Carlo arithmetic).
#
# Tolerance derivation. Both FP32 implementations evaluate the same real function on the same FP32
# weights; they differ only in rounding. u = 2^-24 is the FP32 unit roundoff.
# 1. The error model of one FP32 op. Rounding errors are modelled as independent, mean zero and
#    bounded by u (the probabilistic rounding error analysis of Higham & Mary, SIAM J. Sci. Comput.
#    41(5), 2019). A sum of K terms in any order (sequential, blocked, pairwise, FMA) then has an
#    error Σ_i s_i·δ_i over its K partial sums |s_i| ≤ Σ|a_i·b_i|, with variance ≤ K·u²/3·(Σ|a_i·b_i|)²:
#    that of a uniform draw in [−L, L] with L = gamma(K)·Σ|a_i·b_i|, gamma(K) = √K·u. The local
#    half-widths L used below:
#    dot product / sum of K terms  gamma(K)·Σ|a_i·b_i|; linear layers gamma(K + 2) (the engine may
#                                  widen or block-scale a weight in a separate rounding step)
#    +, −, ×, ÷, sqrt              u·|result|
#    exp (and sigmoid, silu)       C_EXP·u relative (the engine's vec_exp.h: degree-7 Taylor,
#                                  truncation < 7e-9, Horner and 2^n scaling; glibc expf < 1 ulp);
#                                  an absolute error δ in exp's argument is a relative error δ
#    RMSNorm                       Σx² (gamma(D), positive terms, halved by the square root), then
#                                  ÷D, +eps, sqrt, ÷, ×x, ×w: (gamma(D)/2 + 6u)·|y|
#    RoPE                          an angle error δφ moves cos/sin by ≤ δφ. Hugging Face builds the
#                                  YaRN inv_freq in FP32 (theta ** (i/d) through powf: (ln θ + 1)·u
#                                  relative; reciprocal, ramp blend, p·inv_freq: < 7u more), so
#                                  δφ ≤ (ln θ + 8)·u·|φ| + 2u for cos/sin (a systematic error,
#                                  drawn here like the others); the engine's FP64-built table
#                                  (rope_table) is within u. The rotation adds 3u·(|x0·c| + |x1·s|).
#                                  LongRoPE (MiniCPM3): 1 / (ext · θ^(i/d)) is one product in place
#                                  of the ramp blend, inside the same 7u; cos / sin scaled by its
#                                  attention factor a scale δφ with them (×a in the bound).
#    MiniCPM3 scalings             embeddings × scale_emb, branch × residual scale, hidden ÷
#                                  (D / dim_model_base): one rounding each, u·|result|
#    attention scores              decompressed: k_nope = W_UK·c (r terms), q·k (d_qk terms);
#                                  absorbed: q_nope·W_UK (d_n terms), then ·[c | k_pe] (r + d_r);
#                                  the larger of the two sums of gammas, times scale·(Σ_j
#                                  (|q_nope|·|W_UK|)_j·|c_j| + |q_pe|·|k_pe|), plus 3u·|z|
#    softmax                       z − max (u·|z − m|), exp (C_EXP·u), Σ over T keys (gamma(T)),
#                                  ÷ (u), and ceil(T/16) online-softmax rescalings (any tile of at
#                                  least 16 keys) of (C_EXP + 3)·u + u·(the row's score range) each
#    attention output              Σ_t p_t·v_t and the W_UV product in either order:
#                                  (gamma(T) + gamma(r) + (rescalings + 2)·u)·Σ_t p_t·(|W_UV|·|c_t|)
#    MoE                           router logits as a linear layer; softmax / sigmoid as above;
#                                  + bias (u); normalisation (gamma(K) + 3u); scaling (u);
#                                  Σ_k w_k·y_k + shared: (gamma(K + 1) + u)·Σ|terms|
#    residual add                  u·|h|
#    BF16 cache (engine)           not an error term: the rounding of c and k_pe is applied to
#                                  each perturbed copy, so a value near a BF16 midpoint flips to
#                                  the neighbour in some copies, as it may in a real run.
#    BF16 products (engine,        x of a weight product may be rounded to BF16 before BF16 dot
#    --matmul-dtype bf16)          products (kernels/linear.h; weights are BF16, or FP8 widened
#                                  exactly): each x_j gets its own relative error δ_j, |δ_j| ≤
#                                  2^-8 (BF16's unit roundoff, 8 significant bits), independent
#                                  and mean zero like the rest. Modelled where it enters: every
#                                  perturbed copy multiplies x by (1 + δ) with δ uniform in
#                                  [−2^-8, 2^-8] before the product, on every row of every product
#                                  but the router's (always FP32), whether or not the engine takes
#                                  the BF16 kernel for that product (decode-sized ones stay FP32):
#                                  the bound covers both.
#    BF16 attention (engine,       the absorbed query [q_nope·W_UK | q_pe] rounded to BF16 before
#    --attention-dtype bf16)       its dot products with the (BF16) cache rows, and on the
#                                  BF16-P variants the probabilities rounded to BF16 before P·c
#                                  (kernels/mla_attention.h; docs/kernels/mla_decode.md): each a
#                                  relative δ, |δ| ≤ 2^-8, drawn per element in every perturbed
#                                  copy as above, on every query row (prefill chunks up to the
#                                  absorption threshold take the same kernels).
# 2. Monte Carlo arithmetic (Parker 1997; Verificarlo): the model runs in float64 on S + 1 copies;
#    copy 0 is exact, copies 1..S add to every op's result an independent uniform draw in [−L, L].
#    This carries the local errors through the network's real Jacobians (a sum of many independent
#    terms, hence close to Gaussian), and through its discrete parts: a routing choice or a BF16
#    rounding that the perturbations flip. σ̂ is the RMS over the S copies of copy − exact, per
#    element. Since |s_i| ≤ Σ|a_i·b_i| overstates the partial sums, a real implementation's error
#    spread σ is below σ̂ (transformers measures at 2-3 % of the bound below, i.e. |e| < 0.35·σ̂).
# 3. bound = K_SIGMA·σ̂ + u·|x|. If a real error e were Gaussian with σ = the model's, e/σ̂ would be
#    Student-t with S degrees of freedom: P(|t_32| > 10) = 2.3e-11, so over the ~10^5 elements
#    one check compares, a false failure has probability < 1e-5.
# One implementation passes against the exact values when |a − x64| ≤ bound, two against each
# other when |a − b| ≤ 2·bound. A routing choice that flips in some copies, or a greedy step whose
# two best FP64 logits are closer than the sum of their bounds, is a near-tie: reported, and the
# comparison does not fail on what follows from it.

U = 2.0**-24
U_BF16 = 2.0**-8
C_EXP = 4
MC_SAMPLES = 32
K_SIGMA = 10.0
MC_SEED = 20250601


def gamma(k):
    """√K·u: the half-width of a K-term sum's local error, relative to Σ|a_i·b_i| (see above)."""
    return np.sqrt(np.asarray(k, dtype=np.float64)) * U


def bf16_round64(x):
    """float64 values rounded to BF16 (nearest even) directly, without a detour through FP32."""
    _, e = np.frexp(x)
    ulp = np.ldexp(1.0, e - 8)  # 8 significant bits
    return np.round(x / ulp) * ulp  # exact scaling; numpy rounds half to even


def longrope(cfg, ys, extra, seq_len):
    """MiniCPM3's LongRoPE (docs/kernels/rope.md §LongRoPE; transformers'
    _compute_longrope_parameters): inv_freq / ext, ext the short factors unless the sequence
    passes original_max_position_embeddings; and the cos/sin factor."""
    orig = float(ys.get("original_max_position_embeddings") or cfg["max_position_embeddings"])
    ext = ys["long_factor"] if seq_len > orig else ys["short_factor"]
    factor = float(ys.get("factor") or float(cfg["max_position_embeddings"]) / orig)
    att = ys.get("attention_factor")
    if att is None:
        att = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(orig))
    return extra / np.asarray(ext, dtype=np.float64), float(att)


def yarn_inv_freq(cfg, seq_len=1):
    """inv_freq in float64 (docs/kernels/rope.md §Frequencies), the softmax scale (§The two
    mscales), the YaRN m² in it and the factor cos / sin carry (LongRoPE's; 1 for YaRN as
    released)."""
    d = int(cfg["qk_rope_head_dim"])
    theta = float(cfg["rope_theta"])
    i = np.arange(0, d // 2, dtype=np.float64)
    extra = theta ** (-2 * i / d)
    scale = (int(cfg["qk_nope_head_dim"]) + d) ** -0.5
    ys = cfg.get("rope_scaling")
    if not ys:
        return extra, scale, 1.0, 1.0
    if (ys.get("rope_type") or ys.get("type")) == "longrope":
        inv, att = longrope(cfg, ys, extra, seq_len)
        return inv, scale, 1.0, att
    s, l0 = float(ys["factor"]), float(ys["original_max_position_embeddings"])
    bf, bs = float(ys.get("beta_fast", 32)), float(ys.get("beta_slow", 1))

    def corr(n):
        return d * math.log(l0 / (2 * math.pi * n)) / (2 * math.log(theta))

    low, high = max(math.floor(corr(bf)), 0), min(math.ceil(corr(bs)), d - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((i - low) / (high - low), 0, 1)
    inv = extra * (1 - ramp) + extra / s * ramp
    mad = float(ys.get("mscale_all_dim", 0) or 0)
    m = 0.1 * mad * math.log(s) + 1 if s > 1 and mad else 1.0
    return inv, scale * m * m, m * m, 1.0


def v_head_dim(cfg):
    """MiniCPM3 configs leave it out: hidden_size / num_attention_heads."""
    return int(cfg.get("v_head_dim") or int(cfg["hidden_size"]) // int(cfg["num_attention_heads"]))


class Options:
    """Reference-drift switches (docs/MODELS.md §Reference drift) for the sensitivity report; the
    defaults are what transformers 5.23 and the hub remote code both do."""

    def __init__(self, m2=True, group_mask=-math.inf, latent_eps=1e-6, kv_bf16=False, neox=None,
                 products_bf16=False, attention_bf16=False):
        self.m2 = m2  # YaRN softmax factor m² (transformers: yarn_apply_mscale)
        self.group_mask = group_mask  # noaux_tc dropped groups (transformers 5.23: −inf)
        self.latent_eps = latent_eps  # q_a / kv_a norms: the default 1e-6, not rms_norm_eps
        self.kv_bf16 = kv_bf16  # round c and k_pe to BF16 as the engine's cache stores them
        self.neox = neox  # RoPE pairs (i, i + d_r/2); None: MiniCPM3's, not DeepSeek's
        self.products_bf16 = products_bf16  # x of the weight products may be rounded to BF16
        self.attention_bf16 = attention_bf16  # absorbed query and probabilities may be BF16


class Model64:
    """The forward pass in float64 over N copies (leading axis); copies 1.. perturbed by L."""

    def __init__(self, ck, opts, samples):
        self.ck, self.cfg, self.o = ck, ck.config, opts
        self.N = samples + 1
        self.rng = np.random.default_rng(MC_SEED)
        self.rope_dphi = math.log(float(self.cfg["rope_theta"])) + 8
        self.inv_freq, self.scale, self.rope_att = None, None, 1.0  # set by forward (LongRoPE: by T)
        self.neox = self.cfg["model_type"] == "minicpm3" if opts.neox is None else opts.neox  # NeoX pairs
        self.flips = {}  # (layer, token) -> copies whose expert choice differs from copy 0
        self.cache = {}

    def W(self, name):
        if name not in self.cache:
            self.cache[name] = self.ck.w[name].astype(np.float64)
        return self.cache[name]

    def perturb(self, y, L):
        if self.N > 1:
            y = y.copy()
            y[1:] += L[1:] * self.rng.uniform(-1.0, 1.0, size=y[1:].shape)
        return y

    def bf16_rounding(self, x):
        """x with a relative BF16 rounding error drawn per element in copies 1.. (see above)."""
        if self.N == 1:
            return x
        x = x.copy()
        x[1:] *= 1.0 + U_BF16 * self.rng.uniform(-1.0, 1.0, size=x[1:].shape)
        return x

    def lin(self, x, name, fp32_only=False):
        W = self.W(name)
        if self.o.products_bf16 and not fp32_only:
            x = self.bf16_rounding(x)
        return self.perturb(x @ W.T, gamma(W.shape[1] + 2) * (np.abs(x) @ np.abs(W).T))

    def rms_norm(self, x, name, eps):
        y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * self.W(name)
        return self.perturb(y, (gamma(x.shape[-1]) / 2 + 6 * U) * np.abs(y))

    def rope(self, x, pos):
        """Pairs (2i, 2i+1) (DeepSeek's interleaved layout) or (i, i + d_r/2) (MiniCPM3)
        rotated by pos·inv_freq[i], cos / sin times rope_att; x [N, T, (H,) d_r]."""
        phi = pos[:, None] * self.inv_freq[None, :]
        if x.ndim == 4:
            phi = phi[:, None, :]
        c, s = np.cos(phi) * self.rope_att, np.sin(phi) * self.rope_att
        h = x.shape[-1] // 2
        a, b = (np.s_[..., :h], np.s_[..., h:]) if self.neox else (np.s_[..., 0::2], np.s_[..., 1::2])
        x0, x1 = x[a], x[b]
        y, L = np.empty_like(x), np.empty_like(x)
        y[a], y[b] = x0 * c - x1 * s, x0 * s + x1 * c
        ang = (np.abs(x0) + np.abs(x1)) * self.rope_att * (self.rope_dphi * np.abs(phi) + 2) * U
        L[a] = ang + 3 * U * (np.abs(x0 * c) + np.abs(x1 * s))
        L[b] = ang + 3 * U * (np.abs(x0 * s) + np.abs(x1 * c))
        return self.perturb(y, L)

    def cache_round(self, x):
        return bf16_round64(x) if self.o.kv_bf16 else x

    def attention(self, l, qn, qp, c, kp):
        """Causal MLA; qn [N,T,H,d_n], qp [N,T,H,d_r] rotated, c [N,T,r], kp [N,T,d_r]."""
        cfg = self.cfg
        H, dn, dv = int(cfg["num_attention_heads"]), int(cfg["qk_nope_head_dim"]), v_head_dim(cfg)
        r, dr = int(cfg["kv_lora_rank"]), int(cfg["qk_rope_head_dim"])
        T = c.shape[1]
        kvb = self.W(f"model.layers.{l}.self_attn.kv_b_proj.weight").reshape(H, dn + dv, r)
        Wk, Wv = kvb[:, :dn, :], kvb[:, dn:, :]
        if self.o.attention_bf16:  # the absorbed query, as the BF16 kernels read it
            qa = self.bf16_rounding(np.einsum("nshd,hdr->nshr", qn, Wk))
            z = self.scale * (np.einsum("nshr,ntr->nhst", qa, c)
                              + np.einsum("nshd,ntd->nhst", self.bf16_rounding(qp), kp))
        else:
            kn = np.einsum("hdr,ntr->nthd", Wk, c)
            z = self.scale * (np.einsum("nshd,nthd->nhst", qn, kn) + np.einsum("nshd,ntd->nhst", qp, kp))
        A = np.einsum("nshr,ntr->nhst", np.einsum("nshd,hdr->nshr", np.abs(qn), np.abs(Wk)), np.abs(c))
        A += np.einsum("nshd,ntd->nhst", np.abs(qp), np.abs(kp))
        g = max(gamma(r) + gamma(dn + dr), gamma(dn) + gamma(r + dr))
        z = self.perturb(z, self.scale * g * A + 3 * U * np.abs(z))
        mask = np.tril(np.ones((T, T), dtype=bool))  # [s, t]: key t visible from query s
        zm = np.where(mask, z, -np.inf)
        m = zm.max(axis=-1, keepdims=True)
        e = np.exp(zm - m)
        p = e / e.sum(axis=-1, keepdims=True)
        keys = np.arange(1, T + 1, dtype=np.float64)[:, None]  # per query row
        resc = np.ceil(keys / 16)
        dist = np.where(mask, np.abs(z - m), 0.0)
        span = dist.max(axis=-1, keepdims=True)
        p = self.perturb(p, p * (U * dist + (C_EXP + 3) * U + gamma(keys) + resc * ((C_EXP + 3) * U + U * span)))
        if self.o.attention_bf16:
            p = self.bf16_rounding(p)
        v = np.einsum("hdr,ntr->nthd", Wv, c)
        o = np.einsum("nhst,nthd->nshd", p, v)
        absv = np.einsum("hdr,ntr->nthd", np.abs(Wv), np.abs(c))
        g_o = (gamma(keys) + gamma(r) + (resc + 2) * U)[:, :, None]  # [s, 1, 1]
        return self.perturb(o, g_o * np.einsum("nhst,nthd->nshd", p, absv))

    def mlp(self, x, prefix):
        g = self.lin(x, prefix + "gate_proj.weight")
        up = self.lin(x, prefix + "up_proj.weight")
        a = g / (1.0 + np.exp(-g)) * up
        return self.lin(self.perturb(a, (C_EXP + 5) * U * np.abs(a)), prefix + "down_proj.weight")

    def moe(self, l, x):
        cfg, pre = self.cfg, f"model.layers.{l}.mlp."
        E, K = int(cfg["n_routed_experts"]), int(cfg["num_experts_per_tok"])
        G, Gk = int(cfg.get("n_group") or 1), int(cfg.get("topk_group") or 1)
        method, sf = cfg["topk_method"], float(cfg["routed_scaling_factor"])
        N, T = x.shape[:2]
        z = self.lin(x, pre + "gate.weight", fp32_only=True)  # the router runs in FP32
        if cfg["scoring_func"] == "softmax":
            m = z.max(axis=-1, keepdims=True)
            e = np.exp(z - m)
            s = e / e.sum(axis=-1, keepdims=True)
            s = self.perturb(s, s * (U * np.abs(z - m) + (C_EXP + 3) * U + gamma(E)))
        else:
            s = 1.0 / (1.0 + np.exp(-z))
            s = self.perturb(s, (C_EXP + 4) * U * s)
        bias_name = pre + "gate.e_score_correction_bias"
        choice = s + self.W(bias_name) if bias_name in self.ck.w else s
        choice = self.perturb(choice, U * np.abs(choice))
        if method in ("group_limited_greedy", "noaux_tc") and G > 1:
            per = E // G
            gv = choice.reshape(N, T, G, per)
            gs = np.sort(gv, axis=-1)[..., -2:].sum(axis=-1) if method == "noaux_tc" else gv.max(axis=-1)
            keep = np.argsort(-gs, axis=-1, kind="stable")[..., :Gk]
            dropped = np.ones((N, T, G), dtype=bool)
            np.put_along_axis(dropped, keep, False, axis=-1)
            fill = 0.0 if method == "group_limited_greedy" else self.o.group_mask
            choice = np.where(np.repeat(dropped, per, axis=-1), fill, choice)
        sel = np.argsort(-choice, axis=-1, kind="stable")[..., :K]  # [N, T, K]
        chosen = np.sort(sel, axis=-1)
        for t in np.nonzero(np.any(chosen[1:] != chosen[:1], axis=(0, 2)))[0]:
            self.flips[(l, int(t))] = int(np.sum(np.any(chosen[1:, t] != chosen[0, t], axis=-1)))
        w = np.take_along_axis(s, sel, axis=-1)
        if K > 1 and cfg.get("norm_topk_prob"):  # docs/MODELS.md §MoE routing
            w = w / (w.sum(axis=-1, keepdims=True) + 1e-20)
            w = self.perturb(w, (gamma(K) + 3 * U) * w)
            if cfg["scoring_func"] == "sigmoid":  # V3 scales after normalising; V2 does not
                w = self.perturb(w * sf, U * w * sf)
        else:
            w = self.perturb(w * sf, U * w * sf)
        Y = np.stack([self.mlp(x, f"{pre}experts.{ex}.") for ex in range(E)], axis=2)  # [N,T,E,D]
        Ysel = np.take_along_axis(Y, sel[..., None], axis=2)  # [N,T,K,D]
        shared = self.mlp(x, pre + "shared_experts.")
        routed = w[..., None] * Ysel
        out = routed.sum(axis=2) + shared
        return self.perturb(out, (gamma(K + 1) + U) * (np.abs(routed).sum(axis=2) + np.abs(shared)))

    def forward(self, tokens):
        """All rows of a causal forward: hidden [N, T, D] after each layer, logits [N, T, V]."""
        cfg, N = self.cfg, self.N
        T = len(tokens)
        H = int(cfg["num_attention_heads"])
        dn, dr, r = int(cfg["qk_nope_head_dim"]), int(cfg["qk_rope_head_dim"]), int(cfg["kv_lora_rank"])
        eps = float(cfg["rms_norm_eps"])
        pos = np.arange(T, dtype=np.float64)
        self.inv_freq, self.scale, m2, self.rope_att = yarn_inv_freq(cfg, T)
        if not self.o.m2:
            self.scale /= m2
        # MiniCPM3's scalings (docs/MODELS.md §MiniCPM3, items 1-3): an absent key takes
        # transformers' default, null is a no-op; DeepSeek's forward has none.
        mini = cfg["model_type"] == "minicpm3"
        emb = cfg.get("scale_emb", 12) if mini else None
        emb_scale = float(emb) if emb is not None else 1.0
        depth = cfg.get("scale_depth", 1.4) if mini else None
        rs = float(depth) / math.sqrt(self.ck.num_layers()) if depth is not None else 1.0
        base = cfg.get("dim_model_base", 256) if mini else None
        logit_div = float(cfg["hidden_size"]) / float(base) if base is not None else 1.0

        def residual(h, branch):
            if rs != 1.0:
                branch = self.perturb(branch * rs, U * np.abs(branch * rs))
            return self.perturb(h + branch, U * np.abs(h + branch))

        h = np.repeat(self.W("model.embed_tokens.weight")[np.asarray(tokens)][None], N, axis=0)
        if emb_scale != 1.0:
            h = self.perturb(h * emb_scale, U * np.abs(h * emb_scale))
        hidden = []
        for l in range(self.ck.num_layers()):
            pre = f"model.layers.{l}."
            x = self.rms_norm(h, pre + "input_layernorm.weight", eps)
            if cfg.get("q_lora_rank"):
                cq = self.lin(x, pre + "self_attn.q_a_proj.weight")
                cq = self.rms_norm(cq, pre + "self_attn.q_a_layernorm.weight", self.o.latent_eps)
                q = self.lin(cq, pre + "self_attn.q_b_proj.weight")
            else:
                q = self.lin(x, pre + "self_attn.q_proj.weight")
            q = q.reshape(N, T, H, dn + dr)
            kv = self.lin(x, pre + "self_attn.kv_a_proj_with_mqa.weight")
            c = self.rms_norm(kv[..., :r], pre + "self_attn.kv_a_layernorm.weight", self.o.latent_eps)
            c = self.cache_round(c)
            kp = self.cache_round(self.rope(kv[..., r:], pos))
            o = self.attention(l, q[..., :dn], self.rope(q[..., dn:], pos), c, kp)
            h = residual(h, self.lin(o.reshape(N, T, -1), pre + "self_attn.o_proj.weight"))
            x = self.rms_norm(h, pre + "post_attention_layernorm.weight", eps)
            moe = (cfg.get("n_routed_experts") and l >= int(cfg.get("first_k_dense_replace") or 0)
                   and l % int(cfg.get("moe_layer_freq") or 1) == 0)
            h = residual(h, self.moe(l, x) if moe else self.mlp(x, pre + "mlp."))
            hidden.append(h)
        x = self.rms_norm(h, "model.norm.weight", eps)
        if logit_div != 1.0:
            x = self.perturb(x / logit_div, U * np.abs(x / logit_div))
        return hidden, self.lin(x, "lm_head.weight")


def mc_forward(ck, tokens, samples=MC_SAMPLES, **opts):
    """(hidden, logits, flips): hidden[l] and logits are (exact values, bound) pairs; flips maps
    (layer, token) to the number of copies whose expert choice differed (routing near-ties)."""
    m = Model64(ck, Options(**opts), samples)
    hidden, logits = m.forward(tokens)

    def split(x):
        if samples == 0:
            return x[0], None
        sigma = np.sqrt(np.mean((x[1:] - x[0]) ** 2, axis=0))
        return x[0], K_SIGMA * sigma + U * np.abs(x[0])

    return [split(h) for h in hidden], split(logits), m.flips
