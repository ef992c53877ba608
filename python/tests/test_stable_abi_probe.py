"""The stable-ABI probe (python/stable_abi: xkstable.rms_norm registered with STABLE_TORCH_LIBRARY,
TORCH_TARGET_VERSION 2.10): when it was built (python/stable_abi/build_probe.sh) and torch >= 2.10,
it loads, equals torch.ops.xk.rms_norm bit for bit and passes opcheck. Skipped otherwise."""
import os

import pytest

torch = pytest.importorskip("torch")
import xkernels.torch  # noqa: E402,F401

SO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "stable_abi",
                  "libxk_stable_probe.so")
if tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 10) or not os.path.exists(SO):
    pytest.skip("stable-ABI probe not built or torch < 2.10", allow_module_level=True)


def test_stable_probe_matches_ctypes_op():
    torch.ops.load_library(SO)
    x, w = torch.randn(3, 5, 48), torch.randn(48)
    got = torch.ops.xkstable.rms_norm(x, w, 1e-6)
    torch.testing.assert_close(got, torch.ops.xk.rms_norm(x, w, 1e-6), rtol=0, atol=0)
    torch.testing.assert_close(torch.ops.xkstable.rms_norm(x.transpose(0, 1), w, 1e-6),
                               torch.ops.xk.rms_norm(x.transpose(0, 1), w, 1e-6), rtol=0, atol=0)
    torch.library.opcheck(torch.ops.xkstable.rms_norm.default, (x, w, 1e-6),
                          test_utils=("test_schema", "test_autograd_registration"))
    with pytest.raises(RuntimeError):
        torch.ops.xkstable.rms_norm(x.double(), w.double(), 1e-6)
