import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # flm_gemma4, flm_gemma4_f64
# more numba threads than cores, so determinism is shown across counts
# above 2 on a 2-core machine too (read when numba is first imported)
os.environ.setdefault("NUMBA_NUM_THREADS", str(max(4, os.cpu_count() or 1)))
