"""gpu_e2e.py with the decode attention's split plan forced (session 38's sweep at 1024-1280-key contexts).

SPLITS=n forces n even splits (native_attention.SPLIT_OVERRIDE), CHUNK=k fixed chunks of k keys; the rest of the
command line is gpu_e2e.py's.
"""

import os
import runpy
import sys

from revolta_kernels import native_attention

if os.environ.get("SPLITS"):
    native_attention.SPLIT_OVERRIDE = int(os.environ["SPLITS"])
if os.environ.get("CHUNK"):
    native_attention.CHUNK_OVERRIDE = int(os.environ["CHUNK"])
sys.argv = ["benchmarks/gpu_e2e.py", *sys.argv[1:]]
sys.path.insert(0, "benchmarks")
runpy.run_path("benchmarks/gpu_e2e.py", run_name="__main__")
