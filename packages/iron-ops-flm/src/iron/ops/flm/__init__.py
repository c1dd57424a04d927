"""iron-ops-flm: the FastFlowLM-shaped GEMM (one image for every shape, a
memtile B pool armed per shape) and its iron-design design, bfp16ebs8
packing and DequantBFP; Gemma 4's PrefillAttention,
PrefillSlidingAttention, DecodeLayer and LMHead.

Importing this package imports no operator module: `from iron.ops.flm
import FLMGemm` imports `iron.ops.flm.gemm` (and what it needs) on first
use. The rest lives in its modules: `iron.ops.flm.packing`, `.schedule`,
`.design`, `.gemma4`, `.prefill`, `.decode_design`, `.host`."""

from iron.core.lazy import lazy_exports
from iron.ops.flm.plugin import OPERATORS

__getattr__, __dir__, __all__ = lazy_exports(
    __name__, {name: module for name, (module, _) in OPERATORS.items()}
)
