import os
import sys
from pathlib import Path

# the host kernels' determinism tests split work 1, 2, 3 and 4 ways: numba's
# pool must hold 4 threads even on a 2-core host (set before numba starts)
os.environ.setdefault("NUMBA_NUM_THREADS", str(max(4, os.cpu_count() or 1)))

sys.path.insert(0, str(Path(__file__).parent))  # support: the tests' shared helpers
