"""Small transformer blocks written like Hugging Face's Llama / BERT modules (no transformers
dependency): the patterns xkernels.torch.optimize recognises, with everything else left alone."""
import math

import torch
from torch import nn


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size) + 0.1 * torch.randn(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class GemmaRMSNorm(nn.Module):
    """A look-alike optimize() must leave alone: (1 + weight)."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(0.1 * torch.randn(dim))

    def forward(self, x):
        out = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * (1.0 + self.weight.float())).type_as(x)


class LlamaMLP(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, hidden, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)

    def forward(self, x):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        inv = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim))
        ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None]
        emb = torch.cat([ang, ang], dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        o = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, -1))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, hidden=64, heads=4, kv_heads=2, inter=160):
        super().__init__()
        self.self_attn = LlamaAttention(hidden, heads, kv_heads)
        self.mlp = LlamaMLP(hidden, inter)
        self.input_layernorm = LlamaRMSNorm(hidden)
        self.post_attention_layernorm = LlamaRMSNorm(hidden)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class BertLayer(nn.Module):
    def __init__(self, hidden=64, heads=4, inter=256):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attn_out = nn.Linear(hidden, hidden)
        self.attn_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, inter)
        self.act = nn.GELU()
        self.output = nn.Linear(inter, hidden)
        self.out_norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x):
        B, T, H = x.shape
        d = H // self.heads
        split = lambda t: t.view(B, T, self.heads, d).transpose(1, 2)
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        s = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), -1)
        a = (s @ v).transpose(1, 2).reshape(B, T, H)
        x = self.attn_norm(x + self.attn_out(a))
        return self.out_norm(x + self.output(self.act(self.intermediate(x))))


# ---- Hugging Face transformers >= 4.48 style Llama (LlamaAttention takes position_embeddings and a
# cache object with update(); the decoder layer passes them through) ------------------------------

class LlamaConfig:
    def __init__(self, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=160,
                 rope_theta=10000.0, rms_norm_eps=1e-6):
        self.hidden_size, self.num_attention_heads = hidden_size, num_attention_heads
        self.num_key_value_heads, self.intermediate_size = num_key_value_heads, intermediate_size
        self.rope_theta, self.rms_norm_eps = rope_theta, rms_norm_eps
        self.head_dim = hidden_size // num_attention_heads


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, config):
        super().__init__()
        d = config.head_dim
        self.register_buffer("inv_freq", 1.0 / (config.rope_theta ** (torch.arange(0, d, 2).float() / d)),
                             persistent=False)

    def forward(self, x, position_ids):
        freqs = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def apply_rotary_pos_emb(q, k, cos, sin):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class HFLlamaAttention(nn.Module):
    """transformers' LlamaAttention (sdpa path), same attributes and forward signature."""

    def __init__(self, config, layer_idx=0):
        super().__init__()
        self.config, self.layer_idx = config, layer_idx
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        self.is_causal = True
        H, hq, hkv = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
        self.q_proj = nn.Linear(H, hq * self.head_dim, bias=False)
        self.k_proj = nn.Linear(H, hkv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(H, hkv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(hq * self.head_dim, H, bias=False)

    def forward(self, hidden_states, position_embeddings, attention_mask=None, past_key_value=None,
                cache_position=None, **kwargs):
        shape = hidden_states.shape[:-1] + (-1, self.head_dim)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        cos, sin = position_embeddings
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        if past_key_value is not None:
            k, v = past_key_value.update(k, v, self.layer_idx, {"sin": sin, "cos": cos})
        k = k.repeat_interleave(self.num_key_value_groups, dim=1)
        v = v.repeat_interleave(self.num_key_value_groups, dim=1)
        causal = attention_mask is None and q.shape[2] > 1
        o = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask, is_causal=causal,
                                                       scale=self.scaling)
        o = o.transpose(1, 2).reshape(*hidden_states.shape[:-1], -1).contiguous()
        return self.o_proj(o), None


class HFLlamaDecoderLayer(nn.Module):
    def __init__(self, config, layer_idx=0):
        super().__init__()
        self.self_attn = HFLlamaAttention(config, layer_idx)
        self.mlp = LlamaMLP(config.hidden_size, config.intermediate_size)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, hidden_states, position_embeddings, attention_mask=None, past_key_value=None, **kwargs):
        h, _ = self.self_attn(hidden_states=self.input_layernorm(hidden_states), position_embeddings=position_embeddings,
                              attention_mask=attention_mask, past_key_value=past_key_value)
        hidden_states = hidden_states + h
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class HFLlamaModel(nn.Module):
    """Layers + rotary embedding + final norm (no embedding table: takes hidden states)."""

    def __init__(self, config, layers=2):
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList(HFLlamaDecoderLayer(config, i) for i in range(layers))
        self.rotary_emb = LlamaRotaryEmbedding(config)
        self.norm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x, past_key_values=None, attention_mask=None):
        start = 0 if past_key_values is None else past_key_values.get_seq_length()
        pos = torch.arange(start, start + x.shape[1])[None]
        pe = self.rotary_emb(x, pos)
        for layer in self.layers:
            x = layer(x, pe, attention_mask, past_key_values)
        return self.norm(x)


class DynamicCache:
    """transformers' DynamicCache, reduced to what the attention modules call."""

    def __init__(self):
        self.k, self.v = {}, {}

    def get_seq_length(self, layer_idx=0):
        return 0 if layer_idx not in self.k else self.k[layer_idx].shape[2]

    def update(self, k, v, layer_idx, cache_kwargs=None, **kwargs):
        if layer_idx in self.k:
            self.k[layer_idx] = torch.cat([self.k[layer_idx], k], 2)
            self.v[layer_idx] = torch.cat([self.v[layer_idx], v], 2)
        else:
            self.k[layer_idx], self.v[layer_idx] = k, v
        return self.k[layer_idx], self.v[layer_idx]
