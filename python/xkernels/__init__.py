"""xkernels: CPU kernels (GEMM, norms, RoPE, GLU, softmax, quantization, embedding_bag, conv) with
runtime ISA dispatch, through libxk's C API (ctypes: no compiled dependency on Python or torch).

    import xkernels as xk
    y = xk.ops.rms_norm(x, w)             # NumPy arrays
    import xkernels.torch                  # torch.ops.xk.* and xkernels.torch.optimize(model)
"""
from ._lib import XkError, XkInvalidArgument, XkUnsupported, lib  # noqa: F401

__version__ = "0.1.0"


def library_path():
    """Path of the libxk.so in use."""
    return lib().path


def __getattr__(name):
    # numpy is optional: xkernels.ops imports it on first use
    if name == "ops":
        import importlib
        return importlib.import_module(".ops", __name__)
    raise AttributeError(name)
