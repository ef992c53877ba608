// xkernels — umbrella header.
#pragma once
#include "xk/error.hpp"
#include "xk/types.hpp"
#include "xk/isa.hpp"
#include "xk/runtime.hpp"
#include "xk/eltwise.hpp"
#include "xk/gemm.hpp"
#include "xk/conv.hpp"
#include "xk/embedding_bag.hpp"
#include "xk/norm.hpp"
#include "xk/rope.hpp"
#include "xk/quant.hpp"
#include "xk/gpu.hpp"
