// NMS, vectorised IoU: the "avx512:nms" / "avx2:nms" entries.
//
// The boxes are sorted once (nms_sort: descending score, ties by index, score threshold applied)
// into contiguous x1 / y1 / x2 / y2 / area (/ class) arrays; then the greedy sweep of torchvision:
// each kept box's IoU against all later boxes, 16 (AVX-512) or 8 (AVX2) at a time, with the same
// f32 operations as torchvision's loop (max / min with its NaN behaviour, one division), the
// suppression flags set by a masked byte store. Boxes already suppressed are recomputed (setting a
// flag twice changes nothing), which keeps the loop branch-free.
// GCC 12 reports false "may be used uninitialized" inside the AVX-512 intrinsic headers (masked loads).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/vision/vision.hpp"

namespace xk::detail {
namespace {

// Suppresses the boxes j in (i, n) whose IoU with box i is > thr (and, batched, of i's class).
using SweepFn = void (*)(const NmsSorted& s, bool batched, float thr, int64_t i, int64_t n, uint8_t* supp);

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void sweep_avx512(const NmsSorted& s, bool batched,
                                                                               float thr, int64_t i, int64_t n, uint8_t* supp) {
    const __m512 ix1 = _mm512_set1_ps(s.x1[i]), iy1 = _mm512_set1_ps(s.y1[i]), ix2 = _mm512_set1_ps(s.x2[i]),
                 iy2 = _mm512_set1_ps(s.y2[i]), ia = _mm512_set1_ps(s.area[i]), vt = _mm512_set1_ps(thr),
                 zero = _mm512_setzero_ps();
    const __m512i ic = _mm512_set1_epi64(batched ? s.cls[i] : 0);
    const __m128i ones = _mm_set1_epi8(1);
    for (int64_t j = i + 1; j < n; j += 16) {
        const __mmask16 lm = n - j >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - j)) - 1u);
        const __m512 jx1 = _mm512_maskz_loadu_ps(lm, s.x1.data() + j), jy1 = _mm512_maskz_loadu_ps(lm, s.y1.data() + j);
        const __m512 jx2 = _mm512_maskz_loadu_ps(lm, s.x2.data() + j), jy2 = _mm512_maskz_loadu_ps(lm, s.y2.data() + j);
        const __m512 ja = _mm512_maskz_loadu_ps(lm, s.area.data() + j);
        // std::max(a, b) = a < b ? b : a == _mm512_max_ps(b, a); std::min(a, b) == _mm512_min_ps(b, a).
        const __m512 xx1 = _mm512_max_ps(jx1, ix1), yy1 = _mm512_max_ps(jy1, iy1);
        const __m512 xx2 = _mm512_min_ps(jx2, ix2), yy2 = _mm512_min_ps(jy2, iy2);
        const __m512 w = _mm512_max_ps(_mm512_sub_ps(xx2, xx1), zero), h = _mm512_max_ps(_mm512_sub_ps(yy2, yy1), zero);
        const __m512 inter = _mm512_mul_ps(w, h);
        const __m512 ovr = _mm512_div_ps(inter, _mm512_sub_ps(_mm512_add_ps(ia, ja), inter));
        __mmask16 m = _mm512_mask_cmp_ps_mask(lm, ovr, vt, _CMP_GT_OQ);
        if (batched) {
            const __mmask8 lo = _mm512_cmpeq_epi64_mask(_mm512_maskz_loadu_epi64(static_cast<__mmask8>(lm), s.cls.data() + j), ic);
            const __mmask8 hi =
                _mm512_cmpeq_epi64_mask(_mm512_maskz_loadu_epi64(static_cast<__mmask8>(lm >> 8), s.cls.data() + j + 8), ic);
            m &= static_cast<__mmask16>(lo | (static_cast<unsigned>(hi) << 8));
        }
        if (m) _mm_mask_storeu_epi8(supp + j, m, ones);
    }
}

__attribute__((target("avx2,fma"))) void sweep_avx2(const NmsSorted& s, bool batched, float thr, int64_t i,
                                                    int64_t n, uint8_t* supp) {
    const __m256 ix1 = _mm256_set1_ps(s.x1[i]), iy1 = _mm256_set1_ps(s.y1[i]), ix2 = _mm256_set1_ps(s.x2[i]),
                 iy2 = _mm256_set1_ps(s.y2[i]), ia = _mm256_set1_ps(s.area[i]), vt = _mm256_set1_ps(thr),
                 zero = _mm256_setzero_ps();
    const __m256i ic = _mm256_set1_epi64x(batched ? s.cls[i] : 0);
    int64_t j = i + 1;
    for (; j + 8 <= n; j += 8) {
        const __m256 xx1 = _mm256_max_ps(_mm256_loadu_ps(s.x1.data() + j), ix1);
        const __m256 yy1 = _mm256_max_ps(_mm256_loadu_ps(s.y1.data() + j), iy1);
        const __m256 xx2 = _mm256_min_ps(_mm256_loadu_ps(s.x2.data() + j), ix2);
        const __m256 yy2 = _mm256_min_ps(_mm256_loadu_ps(s.y2.data() + j), iy2);
        const __m256 w = _mm256_max_ps(_mm256_sub_ps(xx2, xx1), zero), h = _mm256_max_ps(_mm256_sub_ps(yy2, yy1), zero);
        const __m256 inter = _mm256_mul_ps(w, h);
        const __m256 ovr =
            _mm256_div_ps(inter, _mm256_sub_ps(_mm256_add_ps(ia, _mm256_loadu_ps(s.area.data() + j)), inter));
        unsigned m = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(ovr, vt, _CMP_GT_OQ)));
        if (batched && m) {
            const __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s.cls.data() + j));
            const __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s.cls.data() + j + 4));
            const unsigned e = static_cast<unsigned>(_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(c0, ic)))) |
                               (static_cast<unsigned>(_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(c1, ic)))) << 4);
            m &= e;
        }
        while (m) {
            supp[j + __builtin_ctz(m)] = 1;
            m &= m - 1;
        }
    }
    const float ax1 = s.x1[i], ay1 = s.y1[i], ax2 = s.x2[i], ay2 = s.y2[i], aa = s.area[i];
    for (; j < n; ++j) {
        if (batched && s.cls[j] != s.cls[i]) continue;
        const float xx1 = std::max(ax1, s.x1[j]), yy1 = std::max(ay1, s.y1[j]);
        const float xx2 = std::min(ax2, s.x2[j]), yy2 = std::min(ay2, s.y2[j]);
        const float w = std::max(0.0f, xx2 - xx1), h = std::max(0.0f, yy2 - yy1);
        const float inter = w * h;
        if (inter / (aa + s.area[j] - inter) > thr) supp[j] = 1;
    }
}

// Batched: the boxes regrouped by class (stable, so each class stays in visiting order) and each
// class swept on its own segment (torchvision's batched_nms on CPU does one NMS per class too);
// the kept boxes are then put back in the global visiting order.
void group_by_class(NmsSorted& s, std::vector<int64_t>& pos, std::vector<int64_t>& seg) {
    const size_t n = s.order.size();
    pos.resize(n);
    std::iota(pos.begin(), pos.end(), int64_t{0});
    std::stable_sort(pos.begin(), pos.end(), [&](int64_t a, int64_t b) { return s.cls[a] < s.cls[b]; });
    NmsSorted g;
    g.order.resize(n); g.x1.resize(n); g.y1.resize(n); g.x2.resize(n); g.y2.resize(n); g.area.resize(n); g.cls.resize(n);
    seg.clear();
    for (size_t k = 0; k < n; ++k) {
        const int64_t q = pos[k];
        g.order[k] = s.order[q]; g.x1[k] = s.x1[q]; g.y1[k] = s.y1[q]; g.x2[k] = s.x2[q]; g.y2[k] = s.y2[q];
        g.area[k] = s.area[q]; g.cls[k] = s.cls[q];
        if (k == 0 || g.cls[k] != g.cls[k - 1]) seg.push_back(static_cast<int64_t>(k));
    }
    seg.push_back(static_cast<int64_t>(n));
    s = std::move(g);
}

class NmsSimd final : public NmsKernel {
public:
    explicit NmsSimd(SweepFn f) : f_(f) {}
    int64_t run(const NmsProblem& p, const NmsArgs& a) const override {
        thread_local NmsSorted s;
        thread_local std::vector<uint8_t> supp;
        thread_local std::vector<int64_t> pos, seg;
        thread_local std::vector<std::pair<int64_t, int64_t>> kept_pos;  // (global position, box)
        nms_sort(p, a, s);
        const int64_t n = static_cast<int64_t>(s.order.size());
        const int64_t limit = p.d.max_output > 0 ? p.d.max_output : p.d.num_boxes;
        supp.assign(static_cast<size_t>(n) + 64, 0);
        if (!p.d.batched) {
            int64_t kept = 0;
            for (int64_t i = 0; i < n && kept < limit; ++i) {
                if (supp[i]) continue;
                a.keep[kept++] = s.order[i];
                if (kept < limit) f_(s, false, p.d.iou_threshold, i, n, supp.data());
            }
            return kept;
        }
        group_by_class(s, pos, seg);
        kept_pos.clear();
        for (size_t g = 0; g + 1 < seg.size(); ++g) {
            int64_t kept_here = 0;
            for (int64_t i = seg[g]; i < seg[g + 1] && kept_here < limit; ++i) {
                if (supp[i]) continue;
                kept_pos.emplace_back(pos[i], s.order[i]);
                ++kept_here;
                if (kept_here < limit) f_(s, false, p.d.iou_threshold, i, seg[g + 1], supp.data());
            }
        }
        std::sort(kept_pos.begin(), kept_pos.end());
        const int64_t kept = std::min<int64_t>(limit, static_cast<int64_t>(kept_pos.size()));
        for (int64_t k = 0; k < kept; ++k) a.keep[k] = kept_pos[k].second;
        return kept;
    }

private:
    SweepFn f_;
};

}  // namespace

std::shared_ptr<const NmsKernel> create_nms_avx2(const NmsProblem&) { return std::make_shared<NmsSimd>(sweep_avx2); }
std::shared_ptr<const NmsKernel> create_nms_avx512(const NmsProblem&) { return std::make_shared<NmsSimd>(sweep_avx512); }

}  // namespace xk::detail
