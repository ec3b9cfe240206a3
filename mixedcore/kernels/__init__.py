"""mixedcore's low-level kernels: validation in Python, computing in the compiled core.

Every public function here checks its arguments (dtypes, shapes, strides, ``out=``) and raises a
``TypeError`` (unsupported type or dtype) or ``ValueError`` (shape, layout or value) that names the
function and shows the values; only then does it hand plain, well-formed arrays to the compiled
core, which releases the GIL.

CPU dispatch: the best instruction-set level of this CPU is chosen at import.  The environment
variable ``MIXEDCORE_ISA`` (``generic``, ``avx2``, ``avx512`` or ``avx512bf16``) forces a lower one.

Layout: ``_runtime`` (instruction-set level, threads, floating-point environment, build and CPU
information), ``_checks`` (the argument checks every family shares), then one module per kernel
family: ``_cast``, ``_scan``, ``_gemm``, ``_igemm`` (int8 x int8 products), ``_wgemm``
(weight-only quantized products), ``_act``, ``_attn``, ``_norm``, ``_conv``, ``_pool``
(``_window``: the image window geometry convolution and pooling share), and ``_plan``, inference
plans made of those families' calls.

``cast`` converts among float16, bfloat16, float32 and float64 and ml_dtypes' float8 formats
float8_e4m3fn and float8_e5m2 (``saturate=True`` clips to a float8 type's range first), bit for
bit as numpy and ml_dtypes do (docs/conversions.md).
"""
from mixedcore.kernels._runtime import (ISA_LEVELS, available_isas, get_num_threads, isa,
                                        set_isa, set_num_threads, threads)
from mixedcore.kernels._cast import cast
from mixedcore.kernels._scan import all_finite, numerics_stats, unscale_and_check
from mixedcore.kernels._gemm import PackedMatrix, matmul, pack, set_gemm_blocks
from mixedcore.kernels._igemm import matmul_int8, quantize_rows
from mixedcore.kernels._wgemm import PackedQuantized, matmul_quantized, pack_quantized
from mixedcore.kernels._act import activation, activation_grad, add, softmax
from mixedcore.kernels._attn import attention
from mixedcore.kernels._norm import layer_norm
from mixedcore.kernels._conv import (PackedConv, col2im, conv2d, depthwise_conv2d, im2col,
                                     pack_conv)
from mixedcore.kernels._pool import pool2d, pool2d_grad
from mixedcore.kernels._plan import Plan

__all__ = [
    "cast",
    "all_finite",
    "unscale_and_check",
    "numerics_stats",
    "matmul",
    "pack",
    "PackedMatrix",
    "set_gemm_blocks",
    "matmul_int8",
    "quantize_rows",
    "matmul_quantized",
    "pack_quantized",
    "PackedQuantized",
    "activation",
    "activation_grad",
    "softmax",
    "add",
    "attention",
    "layer_norm",
    "conv2d",
    "pack_conv",
    "PackedConv",
    "im2col",
    "col2im",
    "depthwise_conv2d",
    "pool2d",
    "pool2d_grad",
    "Plan",
    "isa",
    "available_isas",
    "set_isa",
    "get_num_threads",
    "set_num_threads",
    "threads",
]
