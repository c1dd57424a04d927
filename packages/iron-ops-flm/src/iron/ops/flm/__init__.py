"""iron-ops-flm: the FastFlowLM-shaped GEMM (one image for every shape, a
memtile B pool armed per shape), bfp16ebs8 packing, DequantBFP and the
schedule model. Import the modules you need: `iron.ops.flm.gemm`,
`.packing`, `.schedule`, `.dequant`, `.model`."""
