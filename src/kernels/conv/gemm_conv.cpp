// conv2d on xk's GEMM: the "gemm:conv" registry entry (channels-last activations; NCHW is
// transposed to NHWC around it, per call).
//
// With NHWC activations, output pixel p = (n, oy, ox) is row p of a P x OC matrix (P = N*OH*OW)
// and, per group g, row p of the convolution is a dot of an im2col row with each of the group's
// weight rows: dst[p, g*OCg + o] = sum_k col_g[p, k] * Wg[o, k], i.e. C = A * B^T with B^T the
// weights as given ([OCg][K] per group in both layouts: ohwi orders k as (kh, kw, ic), oihw as
// (ic, kh, kw), and the im2col row follows the weight order).
//   1x1, stride 1, no padding: A is the source itself (rows of C channels, lda = C) — one GEMM
//   per group, no copy.
//   otherwise: im2col of a block of MB rows (all groups; zeros outside the input) into a
//   per-thread buffer sized to stay in cache (~256 KiB), then one GEMM per group on that block;
//   with at least 2 blocks per thread, one parallel region over the blocks (each thread its own
//   im2col + single-threaded GEMMs), else block after block with the threads inside each step.
// The epilogue is the GEMM's: bias and activation; add_after_activation is the GEMM residual
// (ld_residual = OC); add_before_activation is beta = 1 on dst holding the residual (copied in
// first unless residual == dst). f32 and bf16 (f32 accumulation) as the GEMM runs them, under the
// same ISA cap.
#include <algorithm>
#include <cstring>
#include <vector>

#include "common/parallel.hpp"
#include "kernels/conv/conv.hpp"
#include "xk/gemm.hpp"

namespace xk::detail {
namespace {

constexpr int64_t kColBytes = 256 * 1024;

template <class T>
void im2col(const ConvProblem& pb, const T* src, T* col, int64_t p0, int64_t mb) {
    const ConvDesc& d = pb.d;
    const int64_t G = d.groups, I = pb.icg(), K = I * d.kh * d.kw, ld = G * K;
    const bool ohwi = d.weight_layout == ConvWeightLayout::ohwi;
    const int64_t per_img = pb.oh * pb.ow;
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, ld));
    parallel_for(mb, grain, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t p = p0 + r, n = p / per_img, oy = (p % per_img) / pb.ow, ox = p % pb.ow;
            T* row = col + r * ld;
            for (int64_t ky = 0; ky < d.kh; ++ky) {
                const int64_t y = oy * d.stride_h - d.pad_top + ky * d.dilation_h;
                for (int64_t kx = 0; kx < d.kw; ++kx) {
                    const int64_t x = ox * d.stride_w - d.pad_left + kx * d.dilation_w;
                    const bool in = y >= 0 && y < d.h && x >= 0 && x < d.w;
                    const T* s = in ? src + ((n * d.h + y) * d.w + x) * d.c : nullptr;
                    for (int64_t g = 0; g < G; ++g) {
                        T* rg = row + g * K;
                        if (ohwi) {
                            T* o = rg + (ky * d.kw + kx) * I;
                            if (in) std::memcpy(o, s + g * I, static_cast<size_t>(I) * sizeof(T));
                            else std::memset(o, 0, static_cast<size_t>(I) * sizeof(T));
                        } else {
                            const int64_t tap = ky * d.kw + kx, KK = d.kh * d.kw;
                            for (int64_t i = 0; i < I; ++i) rg[i * KK + tap] = in ? s[g * I + i] : T{};
                        }
                    }
                }
            }
        }
    });
}

GemmDesc gemm_desc(const ConvProblem& pb, int64_t M, int64_t lda) {
    const ConvDesc& d = pb.d;
    GemmDesc g;
    g.M = M;
    g.N = pb.ocg();
    g.K = pb.icg() * d.kh * d.kw;
    g.trans_b = Trans::T;
    g.lda = lda;
    g.ldb = g.K;
    g.ldc = d.oc;
    g.a_type = d.src_dtype;
    g.b_type = d.weight_dtype;
    g.c_type = d.dst_dtype;
    g.epilogue.bias = d.with_bias;
    g.epilogue.act = d.activation;
    if (d.residual == ConvResidual::add_before_activation) g.beta = 1.0f;
    if (d.residual == ConvResidual::add_after_activation) {
        g.epilogue.residual = true;
        g.residual_type = d.dst_dtype;
        g.ld_residual = d.oc;
    }
    return g;
}

bool is_direct(const ConvProblem& p) {
    const ConvDesc& d = p.d;
    return d.kh == 1 && d.kw == 1 && d.stride_h == 1 && d.stride_w == 1 && d.pad_top == 0 && d.pad_bottom == 0 &&
           d.pad_left == 0 && d.pad_right == 0;
}

// Packed: the plain weights (the tail block's plan reads them) and each group's B packed by the
// full-block plan (GemmPlan::pack_b), so blocks never repack B.
struct GemmConvPacked final : ConvPacked {
    GemmConvPacked(std::string l, const void* w, size_t n) : ConvPacked(std::move(l)), plain(n) {
        std::memcpy(plain.data(), w, n);
        data = plain.data();
        bytes = n;
    }
    std::vector<unsigned char> plain;
    std::vector<PackedB> pb;  // one per group
};

class GemmConv final : public ConvKernel {
public:
    explicit GemmConv(const ConvProblem& p) : ConvKernel(p) {
        const ConvDesc& d = p.d;
        P_ = d.n * p.oh * p.ow;
        K_ = p.icg() * d.kh * d.kw;
        direct_ = is_direct(p);
        if (direct_) {
            mb_ = P_;
            full_ = std::make_unique<GemmPlan>(gemm_desc(p, P_, d.c));
        } else {
            const int64_t row_bytes = d.groups * K_ * static_cast<int64_t>(dtype_size(d.src_dtype));
            mb_ = std::clamp<int64_t>(kColBytes / row_bytes, 64, 1024);
            mb_ = std::min(mb_, P_);
            full_ = std::make_unique<GemmPlan>(gemm_desc(p, mb_, d.groups * K_));
            if (P_ % mb_) tail_ = std::make_unique<GemmPlan>(gemm_desc(p, P_ % mb_, d.groups * K_));
        }
    }

    std::string packed_layout() const override {
        return conv_plain_layout(p_) + "|gemm:" + full_->impl_name() + ":mb" + std::to_string(mb_);
    }

    std::shared_ptr<const ConvPacked> pack(const void* weights) const override {
        const ConvDesc& d = p_.d;
        const size_t es = dtype_size(d.weight_dtype);
        auto out = std::make_shared<GemmConvPacked>(packed_layout(), weights,
                                                    static_cast<size_t>(d.oc * K_) * es);
        out->pb = pack_groups(out->plain.data());
        for (const PackedB& b : out->pb) out->bytes += b.size_bytes();
        return out;
    }

    void run(const ConvArgs& a, const ConvPacked* packed) const override {
        const ConvDesc& d = p_.d;
        const void* W = conv_plain_weights(a, packed);
        // Full-block B packed: from the packed weights, or once per call when several blocks
        // share it (otherwise the GEMM packs B itself, as it would anyway).
        std::vector<PackedB> local;
        const std::vector<PackedB>* pbs = nullptr;
        if (packed) pbs = &static_cast<const GemmConvPacked*>(packed)->pb;
        else if (!direct_ && P_ / mb_ >= 2) pbs = &(local = pack_groups(W));
        const int64_t es = static_cast<int64_t>(dtype_size(d.src_dtype)), ed = static_cast<int64_t>(dtype_size(d.dst_dtype));
        const int64_t G = d.groups, I = p_.icg(), O = p_.ocg();
        if (d.residual == ConvResidual::add_before_activation && a.residual != a.dst) {
            const int64_t bytes = P_ * d.oc * ed;
            const auto* from = static_cast<const unsigned char*>(a.residual);
            auto* to = static_cast<unsigned char*>(a.dst);
            parallel_for(bytes, int64_t{1} << 18, [&](int64_t b, int64_t e) { std::memcpy(to + b, from + b, e - b); });
        }
        const bool res_after = d.residual == ConvResidual::add_after_activation;
        // The GEMM's residual may not be its C: an in-place residual after the activation is
        // copied aside first.
        const void* res = a.residual;
        thread_local std::vector<unsigned char> res_copy;
        if (res_after && a.residual == a.dst) {
            const size_t bytes = static_cast<size_t>(P_ * d.oc * ed);
            if (res_copy.size() < bytes) res_copy.resize(bytes);
            std::memcpy(res_copy.data(), a.dst, bytes);
            res = res_copy.data();
        }
        auto run_block = [&](const GemmPlan& plan, const unsigned char* A, int64_t lda_bytes_per_group, int64_t p0) {
            for (int64_t g = 0; g < G; ++g) {
                GemmArgs ga;
                ga.A = A + g * lda_bytes_per_group;
                ga.B = static_cast<const unsigned char*>(W) + g * O * K_ * es;
                ga.C = static_cast<unsigned char*>(a.dst) + (p0 * d.oc + g * O) * ed;
                ga.bias = d.with_bias ? a.bias + g * O : nullptr;
                if (res_after) ga.residual = static_cast<const unsigned char*>(res) + (p0 * d.oc + g * O) * ed;
                if (pbs && &plan == full_.get()) plan.run(ga, (*pbs)[static_cast<size_t>(g)]);
                else plan.run(ga);
            }
        };
        if (direct_) {
            run_block(*full_, static_cast<const unsigned char*>(a.src), I * es, 0);
            return;
        }
        const int64_t ld = G * K_;
        const size_t buf_bytes = static_cast<size_t>(mb_ * ld * es);
        auto do_block = [&](int64_t b) {
            thread_local std::vector<unsigned char> buf;
            if (buf.size() < buf_bytes) buf.resize(buf_bytes);
            const int64_t p0 = b * mb_, mb = std::min(mb_, P_ - p0);
            if (es == 2)
                im2col(p_, static_cast<const uint16_t*>(a.src), reinterpret_cast<uint16_t*>(buf.data()), p0, mb);
            else
                im2col(p_, static_cast<const float*>(a.src), reinterpret_cast<float*>(buf.data()), p0, mb);
            run_block(mb == mb_ ? *full_ : *tail_, buf.data(), K_ * es, p0);
        };
        const int64_t blocks = (P_ + mb_ - 1) / mb_;
        if (get_num_threads() > 1 && blocks >= 2 * get_num_threads()) {
            // Enough blocks: one parallel region over them, each thread im2col-ing into its own
            // buffer and running the block's GEMMs on itself (nested parallel_for runs inline).
            parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
                for (int64_t b = b0; b < b1; ++b) do_block(b);
            });
        } else {
            // Few blocks (small outputs): block after block, each im2col and GEMM on all threads.
            for (int64_t b = 0; b < blocks; ++b) do_block(b);
        }
    }

    std::string backend_info() const override {
        return std::string(direct_ ? "1x1 direct" : "im2col") + " over gemm " + full_->impl_name();
    }

private:
    std::vector<PackedB> pack_groups(const void* W) const {
        const int64_t es = static_cast<int64_t>(dtype_size(p_.d.weight_dtype)), O = p_.ocg();
        std::vector<PackedB> v;
        v.reserve(static_cast<size_t>(p_.d.groups));
        for (int64_t g = 0; g < p_.d.groups; ++g)
            v.push_back(full_->pack_b(static_cast<const unsigned char*>(W) + g * O * K_ * es));
        return v;
    }

    int64_t P_ = 0, K_ = 0, mb_ = 0;
    bool direct_ = false;
    std::unique_ptr<GemmPlan> full_, tail_;
};

// [N][A][B] -> [N][B][A] for 2- or 4-byte elements, in 32 x 32 tiles, parallel over (n, tile row).
template <class T>
void transpose(const T* in, T* out, int64_t N, int64_t A, int64_t B) {
    constexpr int64_t t = 32;
    const int64_t ta = (A + t - 1) / t;
    parallel_for(N * ta, 4, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            const int64_t n = i / ta, a0 = (i % ta) * t, a1 = std::min(A, a0 + t);
            const T* src = in + n * A * B;
            T* dst = out + n * A * B;
            for (int64_t b0 = 0; b0 < B; b0 += t) {
                const int64_t b1 = std::min(B, b0 + t);
                for (int64_t a = a0; a < a1; ++a)
                    for (int64_t b = b0; b < b1; ++b) dst[b * A + a] = src[a * B + b];
            }
        }
    });
}

void transpose_any(const void* in, void* out, size_t es, int64_t N, int64_t A, int64_t B) {
    if (es == 2) transpose(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(out), N, A, B);
    else transpose(static_cast<const float*>(in), static_cast<float*>(out), N, A, B);
}

// NCHW activations: transposed to NHWC into per-thread buffers around the NHWC kernel (the residual
// too), so NCHW never falls back to the reference. Costs one pass over src and two over dst.
class NchwGemmConv final : public ConvKernel {
public:
    explicit NchwGemmConv(const ConvProblem& p) : ConvKernel(p) {
        ConvProblem q = p;
        q.d.layout = ConvLayout::nhwc;
        inner_ = std::make_unique<GemmConv>(q);
    }
    void run(const ConvArgs& a, const ConvPacked* packed) const override {
        const ConvDesc& d = p_.d;
        const size_t es = dtype_size(d.src_dtype), ed = dtype_size(d.dst_dtype);
        const int64_t HW = d.h * d.w, OHW = p_.oh * p_.ow;
        // Per-thread buffers kept between calls (a fresh pair per call had cost page faults on
        // every call); the inner run writes all of dst.
        thread_local std::vector<unsigned char> src, dst;
        const size_t src_bytes = static_cast<size_t>(d.n * d.c * HW) * es, dst_bytes = static_cast<size_t>(d.n * d.oc * OHW) * ed;
        if (src.size() < src_bytes) src.resize(src_bytes);
        if (dst.size() < dst_bytes) dst.resize(dst_bytes);
        transpose_any(a.src, src.data(), es, d.n, d.c, HW);
        ConvArgs b = a;
        b.src = src.data();
        b.dst = dst.data();
        if (d.residual != ConvResidual::none) {
            transpose_any(a.residual, dst.data(), ed, d.n, d.oc, OHW);
            b.residual = dst.data();  // in place
        }
        inner_->run(b, packed);
        transpose_any(dst.data(), a.dst, ed, d.n, OHW, d.oc);
    }
    std::shared_ptr<const ConvPacked> pack(const void* w) const override { return inner_->pack(w); }
    std::string packed_layout() const override { return inner_->packed_layout(); }
    std::string backend_info() const override { return "nchw<->nhwc around " + inner_->backend_info(); }

private:
    std::unique_ptr<GemmConv> inner_;
};

}  // namespace

bool gemm_conv_supports(const ConvProblem&) { return true; }

std::shared_ptr<const ConvKernel> create_gemm_conv(const ConvProblem& p) {
    if (p.d.layout == ConvLayout::nchw) return std::make_shared<NchwGemmConv>(p);
    return std::make_shared<GemmConv>(p);
}

}  // namespace xk::detail
