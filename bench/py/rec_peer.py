"""Issue 30's rows with ours and PyTorch in one process (ctypes over libxk's C API, no xkernels
package needed), alternating in blocks of --block-s seconds (0: call by call, the steadiest on a
shared host with --rounds 30-40) at 1 thread (both libraries; --threads N for N), median of rounds;
each row reports wall time and CPU time (1 thread: the calling thread's, time.thread_time; N
threads: the process's, time.process_time, which counts both libraries' spinning workers too — on
a shared, overloaded host the CPU time is the steadier of the two) and torch / xk ratios (> 1: xk
faster).

    XK_LIBRARY=build/release/libxk.so ~/.cache/xkernels/venv/bin/python bench/py/rec_peer.py \\
        [--table-mb 1024] [--rounds 7] [--filter REGEX] [--threads 1] [--block-s 0.05]

Rows:
  interaction fwd / fwdbwd, f32 / bf16, N = 27, D = 64 / 128, 2048 samples: xk_interaction_* vs
      DLRM's interact_features (cat + bmm + tril_indices gather; IPEX's formula has the same pairs)
  embedding_bag f32 sum, 2048 bags x 100, uniform / Zipf(1.05), D = 64 / 128: xk_embedding_bag_f32
      vs F.embedding_bag (GB/s of gathered rows)
  embedding lookup f32, 204800 rows: xk_embedding_f32 vs F.embedding
  embedding_bag int8 rows vs f32 rows, D = 128 (both xk; the issue's >= 2.5x rows per second):
      xk_embedding_bag_q8_f32 on a table of the same bytes (136-byte fused rows) vs
      xk_embedding_bag_f32; the "torch" columns are the f32 call, the ratio = int8 / f32 rows per second
  embedding_train f32 sum + SGD (lr 1e-6), D = 64 / 128: xk_embedding_bag_f32 forward +
      xk_embedding_bag_backward_update_f32 vs F.embedding_bag(sparse=True) + backward +
      torch.optim.SGD step (GB/s of the forward's gathered rows)
  optim adamw, 1e8 f32 parameters (wd 1e-2): xk_adam_step vs torch.optim.AdamW(foreach=True) over
      100 tensors of 1e6 (GB/s of 28 bytes a parameter)
"""
import argparse
import ctypes
import os
import re
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F


def load_lib():
    lib = ctypes.CDLL(os.environ.get("XK_LIBRARY", "build/release/libxk.so"))
    lib.xk_last_error.restype = ctypes.c_char_p
    lib.xk_set_num_threads.argtypes = [ctypes.c_int]
    return lib


class InteractionDesc(ctypes.Structure):
    _fields_ = [("num_features", ctypes.c_int64), ("dim", ctypes.c_int64), ("dtype", ctypes.c_int),
                ("self_interaction", ctypes.c_int)]


class BagDesc(ctypes.Structure):
    _fields_ = [("num_embeddings", ctypes.c_int64), ("dim", ctypes.c_int64), ("ld_table", ctypes.c_int64),
                ("ld_out", ctypes.c_int64), ("mode", ctypes.c_int), ("include_last_offset", ctypes.c_int),
                ("padding_idx", ctypes.c_int64)]


def check(lib, st):
    if st != 0:
        raise RuntimeError(lib.xk_last_error().decode())


CPU_TIME = time.thread_time  # time.process_time with --threads > 1
BLOCK_S = 0.05  # --block-s


def measure(fa, fb, rounds, min_s=None):
    """Alternate fa / fb; per round each runs >= min_s (default --block-s; 0: one call each).
    Returns medians (wall, cpu) per call."""
    min_s = BLOCK_S if min_s is None else max(min_s, BLOCK_S)
    fa(), fb()
    res = {0: ([], []), 1: ([], [])}
    for _ in range(rounds):
        for k, f in ((0, fa), (1, fb)):
            n, w0, c0 = 0, time.perf_counter(), CPU_TIME()
            while True:
                f()
                n += 1
                if time.perf_counter() - w0 >= min_s and (n >= 2 or min_s == 0):
                    break
            res[k][0].append((time.perf_counter() - w0) / n)
            res[k][1].append((CPU_TIME() - c0) / n)
    return [(statistics.median(res[k][0]), statistics.median(res[k][1])) for k in (0, 1)]


def row(name, nbytes, xk_t, th_t):
    (xw, xc), (tw, tc) = xk_t, th_t
    print(f"{name:52s} xk {xw*1e3:8.2f} ms ({nbytes/xw/1e9:6.2f} GB/s) cpu {xc*1e3:8.2f} | torch {tw*1e3:8.2f} ms "
          f"({nbytes/tw/1e9:6.2f} GB/s) cpu {tc*1e3:8.2f} | torch/xk wall {tw/xw:5.2f} cpu {tc/xc:5.2f}", flush=True)


def interaction_rows(lib, rounds, rx):
    N, B = 27, 2048
    P = N * (N - 1) // 2
    li, lj = torch.tril_indices(N, N, offset=-1)
    for dim in (64, 128):
        for dt, code, es in (("f32", 0, 4), ("bf16", 1, 2)):
            tdt = torch.float32 if dt == "f32" else torch.bfloat16
            x = (torch.rand(B, dim) - 0.5).to(tdt)
            merged = (torch.rand(B, (N - 1) * dim) - 0.5).to(tdt)  # the 26 bags side by side (merged output)
            ly = [merged[:, t * dim:(t + 1) * dim] for t in range(N - 1)]
            g = ((torch.rand(B, dim + P) - 0.5) * 1e-2).to(tdt)
            out = torch.empty(B, dim + P, dtype=tdt)
            gf = [torch.empty(B, dim, dtype=tdt) for _ in range(N)]
            d = InteractionDesc(N, dim, code, 0)
            fp = (ctypes.c_void_p * N)(x.data_ptr(), *[merged.data_ptr() + t * dim * es for t in range(N - 1)])
            ld = (ctypes.c_int64 * N)(dim, *([(N - 1) * dim] * (N - 1)))
            gp = (ctypes.c_void_p * N)(*[t.data_ptr() for t in gf])

            def xk_fwd():
                check(lib, lib.xk_interaction_forward(ctypes.byref(d), ctypes.c_int64(B), fp, ld, ctypes.c_void_p(out.data_ptr()),
                                                      ctypes.c_int64(0)))

            def xk_fb():
                xk_fwd()
                check(lib, lib.xk_interaction_backward(ctypes.byref(d), ctypes.c_int64(B), fp, ld, ctypes.c_void_p(g.data_ptr()),
                                                       ctypes.c_int64(0), gp, None))

            xr = x.detach().clone().requires_grad_(True)
            lyr = [t.detach().clone().requires_grad_(True) for t in ly]

            def th(xx, yy, bwd):
                T = torch.cat([xx] + yy, dim=1).view((B, -1, dim))
                Z = torch.bmm(T, torch.transpose(T, 1, 2))
                R = torch.cat([xx, Z[:, li, lj]], dim=1)
                if bwd:
                    R.backward(g)
                    xx.grad = None
                    for t in yy:
                        t.grad = None
                return R

            # correctness beside the peer (same inputs)
            xk_fwd()
            ref = th(x, ly, False)
            err = (out.float() - ref.float()).abs().max().item()
            fwd_bytes = B * (N * dim + dim + P) * es
            if not rx or re.search(rx, f"interaction/{dt}/fwd_dim:{dim}"):
                with torch.no_grad():
                    a, b = measure(xk_fwd, lambda: th(x, ly, False), rounds)
                row(f"interaction/{dt}/fwd_n:27_dim:{dim}_b:2048 (max|diff| {err:.1e})", fwd_bytes, a, b)
            if not rx or re.search(rx, f"interaction/{dt}/fwdbwd_dim:{dim}"):
                a, b = measure(xk_fb, lambda: th(xr, lyr, True), rounds)
                row(f"interaction/{dt}/fwdbwd_n:27_dim:{dim}_b:2048", fwd_bytes + B * (2 * N * dim + dim + P) * es, a, b)


def zipf_idx(E, n, zipf):
    if not zipf:
        return torch.randint(0, E, (n,), dtype=torch.int64)
    r = np.arange(1, E + 1, dtype=np.float64) ** -1.05
    cdf = np.cumsum(r)
    u = np.random.default_rng(0x2F).random(n) * cdf[-1]
    rank = np.minimum(np.searchsorted(cdf, u), E - 1).astype(np.uint64)
    with np.errstate(over="ignore"):
        v = (rank * np.uint64(0x9E3779B97F4A7C15)) & np.uint64(E - 1)
    return torch.from_numpy(v.astype(np.int64))


def bag_rows(lib, rounds, rx, table_mb):
    bags, pool = 2048, 100
    n = bags * pool
    offsets = torch.arange(0, n, pool, dtype=torch.int64)
    for dim in (64, 128):
        E = (table_mb << 20) // (dim * 4)
        w = torch.rand(E, dim)
        for zipf in (False, True):
            dist = "zipf1.05" if zipf else "uniform"
            idx = zipf_idx(E, n, zipf)
            d = BagDesc(E, dim, 0, 0, 0, 0, -1)
            out = torch.empty(bags, dim)
            lk = torch.empty(n, dim)
            P = ctypes.c_void_p

            def xk_bag():
                check(lib, lib.xk_embedding_bag_f32(ctypes.byref(d), P(w.data_ptr()), ctypes.c_int64(n), P(idx.data_ptr()),
                                                    ctypes.c_int64(bags), P(offsets.data_ptr()), None, P(out.data_ptr())))

            def xk_lookup():
                check(lib, lib.xk_embedding_f32(ctypes.byref(d), P(w.data_ptr()), ctypes.c_int64(n), P(idx.data_ptr()),
                                                P(lk.data_ptr())))

            xk_bag()
            err = (out - F.embedding_bag(idx, w, offsets, mode="sum")).abs().max().item()
            if not rx or re.search(rx, f"embedding_bag/dim:{dim}_{dist}"):
                a, b = measure(xk_bag, lambda: F.embedding_bag(idx, w, offsets, mode="sum"), rounds)
                row(f"embedding_bag/f32/sum_dim:{dim}_{dist} (max|diff| {err:.1e})", n * dim * 4, a, b)
            if not rx or re.search(rx, f"embedding_lookup/dim:{dim}_{dist}"):
                a, b = measure(xk_lookup, lambda: F.embedding(idx, w), rounds)
                row(f"embedding_lookup/f32/rows_dim:{dim}_{dist}", n * dim * 4, a, b)
        del w


def q8_rows(lib, rounds, rx, table_mb):
    """xk int8 row-wise vs xk f32 tables at D = 128, same table bytes, same bags."""
    bags, pool, dim = 2048, 100, 128
    n = bags * pool
    offsets = torch.arange(0, n, pool, dtype=torch.int64)
    P = ctypes.c_void_p
    E = (table_mb << 20) // (dim * 4)
    E8 = (table_mb << 20) // (dim + 8)
    w = torch.rand(E, dim)
    q = torch.randint(0, 256, (E8, dim + 8), dtype=torch.uint8)
    sb = q[:, dim:].view(torch.float32)
    sb[:, 0] = 1e-2  # scale
    sb[:, 1] = -0.5  # bias
    out = torch.empty(bags, dim)
    for zipf in (False, True):
        dist = "zipf1.05" if zipf else "uniform"
        if rx and not re.search(rx, f"embedding_bag/q8_vs_f32_dim:{dim}_{dist}"):
            continue
        i32, i8 = zipf_idx(E, n, zipf), zipf_idx(1 << (E8.bit_length() - 1), n, zipf)  # (power of 2 rows)
        d, d8 = BagDesc(E, dim, 0, 0, 0, 0, -1), BagDesc(E8, dim, 0, 0, 0, 0, -1)

        def xk_q8():
            check(lib, lib.xk_embedding_bag_q8_f32(ctypes.byref(d8), P(q.data_ptr()), ctypes.c_int64(n), P(i8.data_ptr()),
                                                   ctypes.c_int64(bags), P(offsets.data_ptr()), None, P(out.data_ptr())))

        def xk_f32():
            check(lib, lib.xk_embedding_bag_f32(ctypes.byref(d), P(w.data_ptr()), ctypes.c_int64(n), P(i32.data_ptr()),
                                                ctypes.c_int64(bags), P(offsets.data_ptr()), None, P(out.data_ptr())))

        a, b = measure(xk_q8, xk_f32, rounds, min_s=0.05)  # (blocks: the two tables must not evict each other per call)
        row(f"embedding_bag/q8_vs_f32_dim:{dim}_{dist} (torch = xk f32)", n * dim, a, b)


class EmbUpdate(ctypes.Structure):
    _fields_ = [("optimizer", ctypes.c_int), ("lr", ctypes.c_float), ("eps", ctypes.c_float),
                ("state", ctypes.c_void_p), ("ld_state", ctypes.c_int64)]


def train_rows(lib, rounds, rx, table_mb):
    bags, pool = 2048, 100
    n = bags * pool
    offsets = torch.arange(0, n, pool, dtype=torch.int64)
    P = ctypes.c_void_p
    for dim in (64, 128):
        E = (table_mb << 20) // (dim * 4)
        for zipf in (False, True):
            dist = "zipf1.05" if zipf else "uniform"
            if rx and not re.search(rx, f"embedding_train/dim:{dim}_{dist}"):
                continue
            idx = zipf_idx(E, n, zipf)
            wx = torch.rand(E, dim)
            d = BagDesc(E, dim, 0, 0, 0, 0, -1)
            out = torch.empty(bags, dim)
            upd = EmbUpdate(0, 1e-6, 1e-10, None, 0)

            def xk_step():
                check(lib, lib.xk_embedding_bag_f32(ctypes.byref(d), P(wx.data_ptr()), ctypes.c_int64(n), P(idx.data_ptr()),
                                                    ctypes.c_int64(bags), P(offsets.data_ptr()), None, P(out.data_ptr())))
                check(lib, lib.xk_embedding_bag_backward_update_f32(
                    ctypes.byref(d), P(wx.data_ptr()), ctypes.c_int64(n), P(idx.data_ptr()), ctypes.c_int64(bags),
                    P(offsets.data_ptr()), None, P(out.data_ptr()), ctypes.byref(upd)))

            wt = torch.nn.Parameter(wx.clone())
            opt = torch.optim.SGD([wt], lr=1e-6)

            def th_step():
                o = F.embedding_bag(idx, wt, offsets, mode="sum", sparse=True)
                o.backward(o.detach())
                opt.step()
                opt.zero_grad(set_to_none=True)

            a, b = measure(xk_step, th_step, rounds)
            row(f"embedding_train/f32/sum_sgd_dim:{dim}_{dist}", n * dim * 4, a, b)
            del wx, wt, opt


class AdamOpts(ctypes.Structure):
    _fields_ = [("lr", ctypes.c_double), ("beta1", ctypes.c_double), ("beta2", ctypes.c_double), ("eps", ctypes.c_double),
                ("weight_decay", ctypes.c_double), ("adamw", ctypes.c_int), ("amsgrad", ctypes.c_int), ("maximize", ctypes.c_int)]


def optim_rows(lib, rounds, rx):
    if rx and not re.search(rx, "optim/adamw"):
        return
    n_total, n_each = 100_000_000, 1_000_000
    P = ctypes.c_void_p
    p, g, m, v = (torch.full((n_total,), x) for x in (0.5, 1e-3, 0.0, 0.0))
    o = AdamOpts()
    check(lib, lib.xk_adam_options_init(ctypes.byref(o)))
    o.adamw, o.weight_decay = 1, 1e-2
    step = [0]

    def xk_step():
        step[0] += 1
        check(lib, lib.xk_adam_step(ctypes.byref(o), 0, ctypes.c_int64(n_total), P(p.data_ptr()), None, P(g.data_ptr()),
                                    P(m.data_ptr()), P(v.data_ptr()), None, ctypes.c_int64(step[0])))

    ps = [torch.nn.Parameter(torch.full((n_each,), 0.5)) for _ in range(n_total // n_each)]
    for t in ps:
        t.grad = torch.full((n_each,), 1e-3)
    opt = torch.optim.AdamW(ps, lr=1e-3, weight_decay=1e-2, foreach=True)
    a, b = measure(xk_step, opt.step, rounds, min_s=0.3)
    row("optim/f32/adamw_n:1e8 (torch: AdamW(foreach=True))", 28 * n_total, a, b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--table-mb", type=int, default=1024)
    ap.add_argument("--filter", default="")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--block-s", type=float, default=0.05,
                    help="seconds each side runs per round (0: one call each, alternating call by call)")
    args = ap.parse_args()
    global CPU_TIME, BLOCK_S
    BLOCK_S = args.block_s
    if args.threads > 1:
        CPU_TIME = time.process_time
    lib = load_lib()
    check(lib, lib.xk_set_num_threads(args.threads))
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s) each, table {args.table_mb} MiB, rounds {args.rounds}")
    interaction_rows(lib, args.rounds, args.filter)
    bag_rows(lib, args.rounds, args.filter, args.table_mb)
    q8_rows(lib, args.rounds, args.filter, args.table_mb)
    train_rows(lib, args.rounds, args.filter, args.table_mb)
    optim_rows(lib, args.rounds, args.filter)


if __name__ == "__main__":
    main()
