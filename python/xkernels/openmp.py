"""One OpenMP runtime per process, shared with PyTorch.

libxk links the system's libgomp.so.1; PyPI's torch wheels bundle their own copy (torch/lib/
libgomp*.so.1, e.g. libgomp-a34b3233.so.1 in torch 2.5; named libgomp.so.1 in later wheels). Two
runtimes mean two pools of threads that each spin after their parallel regions, and on a machine
with few cores an xk call then waits for a worker that the other pool's spinning thread keeps off
its core (bench/py/threads.py measures it). The dynamic loader matches libxk's NEEDED libgomp.so.1
against the sonames of libraries already loaded, and torch's copy carries that soname, so:
  - torch imported first: libxk binds to torch's runtime (nothing to do);
  - libxk loaded first: we load torch's bundled libgomp (found without importing torch) before
    libxk, so libxk binds to it and torch, imported later, finds the same file already loaded.
XK_TORCH_OPENMP=0 turns this off (libxk then uses the system runtime as linked)."""
import glob
import importlib.util
import os
import sys

shared_runtime = None  # path of torch's libgomp that libxk was bound to, when we did it


def torch_openmp_library():
    """Path of the libgomp bundled with the installed torch (None if torch is absent / has none)."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        hits = sorted(glob.glob(os.path.join(loc, "lib", "libgomp*.so*")))
        if hits:
            return hits[0]
    return None


def configure_before_load():
    global shared_runtime
    if os.environ.get("XK_TORCH_OPENMP", "1") == "0" or "torch" in sys.modules:
        return  # off, or torch's runtime is loaded already (libxk binds to it by soname)
    path = torch_openmp_library()
    if path is None:
        return
    import ctypes
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        shared_runtime = path
    except OSError:
        pass


def openmp_runtimes():
    """The OpenMP runtime libraries mapped in this process (Linux /proc/self/maps)."""
    try:
        with open("/proc/self/maps") as f:
            return sorted({line.split()[-1] for line in f if "gomp" in line.split()[-1] and "/" in line})
    except OSError:
        return []
