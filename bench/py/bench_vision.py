#!/usr/bin/env python3
"""xkernels' vision ops (C API through ctypes) beside torchvision's CPU kernels, in one process, same
inputs, alternating: ROIAlign (Mask R-CNN box head: 1000 boxes, 256 channels, 7 x 7 pooled, one FPN
level 200 x 272 of an 800 x 1088 image, sampling_ratio 2 and adaptive; mask head 14 x 14), NMS (5000
boxes; batched by 80 classes) and FrozenBatchNorm2d (+ ReLU). Each row checks that both sides agree
(max |diff| for ROIAlign / FrozenBN, identical keep lists for NMS) before timing. Median of
--repetitions runs of >= --min-time s each. Threads: XK_BENCH_THREADS (default "1,2"), set alike
(torch.set_num_threads / xk_set_num_threads).

    pip install torchvision (matching torch) into the venv; then
    XK_LIBRARY=build/release/libxk.so python bench/py/bench_vision.py [--filter REGEX]
Rows: name, xk ms, torchvision ms, ratio torchvision/xk (> 1: xk faster).
"""
import argparse
import ctypes as C
import os
import re
import statistics
import time

import torch
import torchvision
from torchvision.ops import batched_nms, nms, roi_align
from torchvision.ops.misc import FrozenBatchNorm2d


class RoiDesc(C.Structure):
    _fields_ = [("n", C.c_int64), ("c", C.c_int64), ("h", C.c_int64), ("w", C.c_int64), ("num_rois", C.c_int64),
                ("pooled_h", C.c_int64), ("pooled_w", C.c_int64), ("spatial_scale", C.c_float),
                ("sampling_ratio", C.c_int64), ("aligned", C.c_int32), ("layout", C.c_int)]


class BnDesc(C.Structure):
    _fields_ = [("n", C.c_int64), ("c", C.c_int64), ("h", C.c_int64), ("w", C.c_int64), ("layout", C.c_int),
                ("eps", C.c_float), ("activation", C.c_int)]


def load_lib():
    path = os.environ.get("XK_LIBRARY") or os.path.join(os.path.dirname(__file__), "..", "..", "build", "release", "libxk.so")
    lib = C.CDLL(path)
    lib.xk_last_error.restype = C.c_char_p
    lib.xk_roi_align_desc_init.argtypes = [C.c_void_p] + [C.c_int64] * 7
    lib.xk_frozen_bn_desc_init.argtypes = [C.c_void_p] + [C.c_int64] * 4
    return lib


def ptr(t):
    return C.c_void_p(t.data_ptr())


def check(lib, st):
    if st != 0:
        raise RuntimeError(lib.xk_last_error().decode())


def timeit(f, min_time, reps):
    f()
    n = 1
    while True:
        s = time.perf_counter()
        for _ in range(n):
            f()
        el = time.perf_counter() - s
        if el > min_time / 4:
            break
        n *= 2
    out = []
    for _ in range(reps):
        s = time.perf_counter()
        for _ in range(n):
            f()
        out.append((time.perf_counter() - s) / n)
    return statistics.median(out)


def mask_rcnn_boxes(k, img_h, img_w, seed):
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(k, 2, generator=g) * torch.tensor([img_w, img_h])
    wh = (torch.rand(k, 2, generator=g) * 0.3 + 0.02) * torch.tensor([img_w, img_h])
    x2y2 = torch.minimum(xy + wh, torch.tensor([img_w - 1.0, img_h - 1.0]))
    return torch.cat([torch.zeros(k, 1), xy, x2y2], 1).contiguous()


def cases(lib):
    rows = []
    # ---- ROIAlign ----
    for (tag, C_, H, W, K, P, sr, scale) in [("box7_sr2", 256, 200, 272, 1000, 7, 2, 0.25),
                                             ("box7_adaptive", 256, 200, 272, 1000, 7, 0, 0.25),
                                             ("mask14_sr2", 256, 200, 272, 100, 14, 2, 0.25)]:
        x = torch.randn(1, C_, H, W)
        boxes = mask_rcnn_boxes(K, H / scale, W / scale, 1)
        for layout in ("nchw", "nhwc"):
            for dt in ("f32", "bf16"):
                if layout == "nchw" and dt == "bf16":
                    continue
                d = RoiDesc()
                check(lib, lib.xk_roi_align_desc_init(C.byref(d), 1, C_, H, W, K, P, P))
                d.spatial_scale = scale
                d.sampling_ratio = sr
                d.layout = 0 if layout == "nchw" else 1
                xs = x.contiguous(memory_format=torch.channels_last) if layout == "nhwc" else x
                if dt == "bf16":
                    xs = xs.bfloat16()
                xin = xs.permute(0, 2, 3, 1).contiguous() if layout == "nhwc" else xs.contiguous()
                out = torch.empty(K, P, P, C_, dtype=xin.dtype) if layout == "nhwc" else torch.empty(K, C_, P, P)
                fn = lib.xk_roi_align_bf16 if dt == "bf16" else lib.xk_roi_align_f32
                ours = lambda fn=fn, d=d, xin=xin, boxes=boxes, out=out: check(lib, fn(C.byref(d), ptr(xin), ptr(boxes), ptr(out)))
                # torchvision on the same tensor (f32: its CPU kernel has no bf16; a channels_last
                # input is made contiguous inside)
                tv_in = xs.float()
                theirs = lambda tv_in=tv_in, boxes=boxes, P=P, scale=scale, sr=sr: roi_align(tv_in, boxes, (P, P), scale, sr, False)
                ours()
                ref = theirs()
                got = out.permute(0, 3, 1, 2).float() if layout == "nhwc" else out
                diff = (got - ref).abs().max().item()
                rows.append((f"roi_align/{dt}/{layout}/{tag}_c{C_}_{H}x{W}_k{K}", ours, theirs, f"max|diff| {diff:.2e}"))
    # ---- NMS ----
    for (tag, M, thr, ncls) in [("5000_iou0.5", 5000, 0.5, 0), ("5000_iou0.7", 5000, 0.7, 0),
                                ("5000_iou0.5_80cls", 5000, 0.5, 80)]:
        g = torch.Generator().manual_seed(3)
        ctr = torch.rand(M, 2, generator=g) * 800
        wh = torch.rand(M, 2, generator=g) * 150 + 10
        b = torch.cat([ctr, ctr + wh], 1).contiguous()
        s = torch.rand(M, generator=g)
        cls = torch.randint(0, max(ncls, 1), (M,), generator=g)
        keep = torch.empty(M, dtype=torch.int64)
        nk = C.c_int64()
        if ncls:
            ours = lambda: check(lib, lib.xk_batched_nms(C.c_int64(M), ptr(b), ptr(s), ptr(cls), C.c_float(thr),
                                                         C.c_float(float("-inf")), C.c_int64(0), ptr(keep), C.byref(nk)))
            theirs = lambda: batched_nms(b, s, cls, thr)
        else:
            ours = lambda: check(lib, lib.xk_nms(C.c_int64(M), ptr(b), ptr(s), C.c_float(thr), C.c_float(float("-inf")),
                                                 C.c_int64(0), ptr(keep), C.byref(nk)))
            theirs = lambda: nms(b, s, thr)
        ours()
        ref = theirs()
        same = torch.equal(keep[: nk.value], ref)
        rows.append((f"nms/f32/{tag}", ours, theirs, f"kept {nk.value} {'same' if same else 'DIFFERENT'}"))
    # ---- FrozenBatchNorm2d + ReLU ----
    for layout in ("nchw", "nhwc"):
        N, C_, H, W = 1, 256, 200, 272
        x = torch.randn(N, C_, H, W)
        bn = FrozenBatchNorm2d(C_)
        bn.weight.uniform_(0.5, 1.5); bn.bias.uniform_(-1, 1); bn.running_mean.uniform_(-1, 1); bn.running_var.uniform_(0.5, 2)
        xs = x.contiguous(memory_format=torch.channels_last) if layout == "nhwc" else x
        out = torch.empty_like(xs)
        d = BnDesc()
        check(lib, lib.xk_frozen_bn_desc_init(C.byref(d), N, C_, H, W))
        d.layout = 0 if layout == "nchw" else 1
        d.activation = 1
        ours = lambda d=d, xs=xs, out=out: check(lib, lib.xk_frozen_batch_norm_f32(
            C.byref(d), ptr(xs), ptr(bn.weight), ptr(bn.bias), ptr(bn.running_mean), ptr(bn.running_var), ptr(out)))
        theirs = lambda xs=xs: torch.relu_(bn(xs))
        ours()
        diff = (out - theirs()).abs().max().item()
        rows.append((f"frozen_bn_relu/f32/{layout}/{N}x{C_}x{H}x{W}", ours, theirs, f"max|diff| {diff:.2e}"))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--filter", default="")
    ap.add_argument("--min-time", type=float, default=0.3)
    ap.add_argument("--repetitions", type=int, default=3)
    a = ap.parse_args()
    threads = [int(t) for t in os.environ.get("XK_BENCH_THREADS", "1,2").split(",") if t.strip()]
    lib = load_lib()
    print(f"torch {torch.__version__} torchvision {torchvision.__version__}")
    rows = [r for r in cases(lib) if re.search(a.filter, r[0])]
    for t in threads:
        torch.set_num_threads(t)
        check(lib, lib.xk_set_num_threads(t))
        for name, ours, theirs, note in rows:
            to = timeit(ours, a.min_time, a.repetitions)
            tt = timeit(theirs, a.min_time, a.repetitions)
            print(f"{name}/threads:{t:<3} xk {to * 1e3:9.3f} ms  torchvision {tt * 1e3:9.3f} ms  {tt / to:6.2f}x  ({note})", flush=True)


if __name__ == "__main__":
    main()
