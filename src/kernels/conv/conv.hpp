// Internal interface of the conv family, shared by its implementations and the tests.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "dispatch/registry.hpp"
#include "xk/conv.hpp"

namespace xk::detail {

// A validated descriptor plus the derived output extents: what implementations are selected and
// created for. Every field of the public descriptor is part of the key (a kernel may specialise
// on any of them: shapes, strides, layouts, dtypes, epilogue).
struct ConvProblem {
    ConvDesc d;
    int64_t oh = 0, ow = 0;

    int64_t icg() const { return d.c / d.groups; }   // input channels per group
    int64_t ocg() const { return d.oc / d.groups; }  // output channels per group
    std::string key() const;
};

// Validates every field of the descriptor (sizes, enums, dtype combination, products) and
// returns the problem. fn names the caller in messages.
ConvProblem conv_validate_desc(const char* fn, const ConvDesc& d);
// Validates the pointers of one call against a validated problem: required ones non-null,
// aligned to their element size, dst not overlapping an input (residual == dst is allowed).
void conv_validate_args(const char* fn, const ConvProblem& p, const ConvArgs& a);

// Weights packed by a kernel (ConvPlan::pack_weights). `layout` names the packed format and the
// weight shape; a kernel accepts exactly the layouts it produces (ConvKernel::packed_layout).
struct ConvPacked {
    explicit ConvPacked(std::string l) : layout(std::move(l)) {}
    virtual ~ConvPacked() = default;
    ConvPacked(const ConvPacked&) = delete;
    ConvPacked& operator=(const ConvPacked&) = delete;
    std::string layout;
    const void* data = nullptr;  // the packed bytes (owned by the derived object)
    size_t bytes = 0;
};

struct ConvKernel {
    virtual ~ConvKernel() = default;
    // The whole convolution of the problem it was created for, on validated arguments. The
    // kernel splits the work itself (detail::parallel_for, or oneDNN's own threading). With
    // `packed` (of this kernel's packed_layout()), args.weights is not read.
    virtual void run(const ConvArgs& a, const ConvPacked* packed = nullptr) const = 0;
    // Weights repacked once for run(a, packed). Default: a plain copy of the weights as given
    // (layout "plain:" + the weight shape), which conv_plain_packed_weights() reads back.
    virtual std::shared_ptr<const ConvPacked> pack(const void* weights) const;
    virtual std::string packed_layout() const;
    // Where the work runs (e.g. oneDNN's implementation name); "" when nothing more to say.
    virtual std::string backend_info() const { return ""; }

    explicit ConvKernel(const ConvProblem& p) : p_(p) {}
    const ConvProblem& problem() const { return p_; }

protected:
    ConvProblem p_;
};

// The weights a plain-layout kernel reads: packed->data when given, else args.weights.
inline const void* conv_plain_weights(const ConvArgs& a, const ConvPacked* packed) {
    return packed ? packed->data : a.weights;
}
// "plain:" + the weight shape (OC, C/groups, KH, KW, weight layout, dtype).
std::string conv_plain_layout(const ConvProblem& p);

// oneDNN's convolution primitive (onednn_conv.cpp): supports() creates the primitive descriptor
// (once per descriptor, remembered) and accepts it only when oneDNN picks a non-reference
// implementation for this shape, dtype and epilogue.
bool onednn_conv_supports(const ConvProblem& p);
std::shared_ptr<const ConvKernel> create_onednn_conv(const ConvProblem& p);
// xk's GEMM on channels-last rows (gemm_conv.cpp): 1x1 / stride 1 / no padding as one GEMM per
// group, anything else through im2col row blocks into a per-thread buffer. NHWC activations (NCHW transposed to NHWC around it per call).
bool gemm_conv_supports(const ConvProblem& p);
// Depthwise (groups == C == OC), NHWC, vectorised over channels (dw_conv.cpp).
bool dw_conv_supports(const ConvProblem& p);
std::shared_ptr<const ConvKernel> create_dw_conv_avx2(const ConvProblem& p);
std::shared_ptr<const ConvKernel> create_dw_conv_avx512(const ConvProblem& p);
std::shared_ptr<const ConvKernel> create_gemm_conv(const ConvProblem& p);

const Registry<ConvProblem, ConvKernel>& conv_registry();
// Routing (conv.cpp): the registry's pick (select() never picks "onednn:conv") unless it is one of
// ours and oneDNN's entry is allowed (ISA cap, machine) and supports the descriptor; then
// XK_CONV_IMPL (onednn | gemm: xk's own pick) forces one, else a one-time timing of both per
// (descriptor, ISA cap, thread count) decides (route_tune.hpp), remembered process-wide. `how`
// (optional) receives "forced", "timed", "cached" or "registry" (what decided).
Registry<ConvProblem, ConvKernel>::Selected conv_select(const ConvProblem& p, const char** how = nullptr);
void conv_tune_clear();  // forgets the timed decisions (tests)

// Reference (specification): direct convolution, fp32 accumulation over (ic, kh, kw) in that
// order, then the epilogue in the order documented in xk/conv.hpp. Parallel over (N, OC-block).
void conv2d_reference(const ConvProblem& p, const ConvArgs& a);

}  // namespace xk::detail

namespace xk::detail {

// ---- int8 convolution (qconv.cpp) ----
struct QConvProblem {
    QConvDesc d;
    int64_t oh = 0, ow = 0;
    std::string key() const;  // every field
};
QConvProblem qconv_validate_desc(const char* fn, const QConvDesc& d);
void qconv_validate_args(const char* fn, const QConvProblem& p, const QConvArgs& a, bool weights_packed = false);
struct QConvPackedData {
    virtual ~QConvPackedData() = default;
    std::string key;  // "<implementation>|<descriptor key>" of the kernel that packed it
};
struct QConvKernel {
    virtual ~QConvKernel() = default;
    // With `packed` (from this kernel's pack()), a.weights is not read.
    virtual void run(const QConvArgs& a, const QConvPackedData* packed = nullptr) const = 0;
    virtual std::shared_ptr<const QConvPackedData> pack(const int8_t* weights) const = 0;
    // Where the work runs (oneDNN's implementation name); "" when nothing more to say.
    virtual std::string backend_info() const { return ""; }
};
// The key a kernel of implementation `impl` stamps on its packs (QConvPackedData::key).
std::string qconv_packed_key(const char* impl, const QConvProblem& p);
const Registry<QConvProblem, QConvKernel>& qconv_registry();

// "onednn:qconv" (onednn_qconv.cpp): oneDNN 2.6's int8 convolution primitive. supports() needs
// a JIT implementation for the descriptor (checked once per descriptor and thread count when its
// primitive descriptor is created, the answer remembered). The registry entry is not selectable:
// qconv_select() routes to it.
bool onednn_qconv_supports(const QConvProblem& p);
std::shared_ptr<const QConvKernel> create_onednn_qconv(const QConvProblem& p);

// Routing between "gemm:qconv" and "onednn:qconv" (qconv.cpp): the registry's pick unless
// oneDNN's entry is allowed (ISA cap, machine) and supports the descriptor; then XK_QCONV_IMPL
// (onednn | gemm) forces one, grouped / depthwise descriptors take oneDNN, else a one-time timing
// of both per (descriptor, ISA cap, thread count), remembered process-wide. `how` (optional)
// receives "forced", "grouped", "timed", "cached" or "registry" (what decided).
Registry<QConvProblem, QConvKernel>::Selected qconv_select(const QConvProblem& p, const char** how = nullptr);
void qconv_tune_clear();  // forgets the timed decisions (tests)
// Reference: exact int32 accumulation, then the epilogue of xk/conv.hpp in f32.
void qconv2d_reference(const QConvProblem& p, const QConvArgs& a);

}  // namespace xk::detail
