#!/usr/bin/env python3
"""Record what a real x86-64 ggml-cpu computes, for kestrel-quant's parity test.

Loads libggml-cpu.so from a local llama.cpp build for AVX2 (the parity
build, so the AVX2 kernels are the ones compiled in) through ctypes and
records:
- Q8_0 / Q8_1 / Q8_K activation quantization of random f32 rows (including
  planted .5 ties), which kestrel-quant must reproduce byte for byte;
- the weight x activation dot for every quantized weight type on random
  weight blocks (random bytes with sane half scales) and the ggml-quantized
  activations, which kestrel-quant must match up to f32 summation order.

Usage:
    python3 scripts/quant/gen_ggml_x86_fixtures.py [path/to/build/bin] \
        > tests/fixtures/quant/ggml_x86.txt
Needs numpy only. Default library dir: ~/.cache/kestrel/llama.cpp/build-avx2/bin
(scripts/build-llama-cpp.sh --parity).

It also runs whole matrix products through ggml's graph API (plain
buffers, and the CPU_REPACK buffer that llama.cpp puts Q4_0/Q4_K weights in),
so the kernel family ggml picks for a batch shape (vec_dot, repacked
gemv/gemm, the tiled K-quant matmul, llamafile sgemm) is recorded too.

Output records:
    case quant <type> <n>      / f32 <input bits> / bytes <ggml output>
    case dot <wtype> <n>       / bytes <weights> / bytes <activations> / f32 <ggml result bits>
    case matmul <wtype> <k> <rows> <ntok> <repack 0|1>
                               / bytes <weights> / f32 <activations, ntok x k> / f32 <result, ntok x rows>
"""

import ctypes
import os
import sys

import numpy as np

LIB_DIR = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/kestrel/llama.cpp/build-avx2/bin")
ctypes.CDLL(os.path.join(LIB_DIR, "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
base = ctypes.CDLL(os.path.join(LIB_DIR, "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
cpu = ctypes.CDLL(os.path.join(LIB_DIR, "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)
cpu.ggml_cpu_init()


class InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


VP = ctypes.c_void_p
for name, res, args in [
    ("ggml_init", VP, [InitParams]),
    ("ggml_new_tensor_2d", VP, [VP, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]),
    ("ggml_mul_mat", VP, [VP, VP, VP]),
    ("ggml_new_graph", VP, [VP]),
    ("ggml_build_forward_expand", None, [VP, VP]),
    ("ggml_get_data", VP, [VP]),
    ("ggml_free", None, [VP]),
    ("ggml_backend_alloc_ctx_tensors_from_buft", VP, [VP, VP]),
    ("ggml_backend_tensor_set", None, [VP, VP, ctypes.c_size_t, ctypes.c_size_t]),
]:
    getattr(base, name).restype = res
    getattr(base, name).argtypes = args
cpu.ggml_graph_compute_with_ctx.argtypes = [VP, VP, ctypes.c_int]
# C++ linkage: ggml_backend_cpu_repack_buffer_type()
REPACK_BUFT = getattr(cpu, "_Z35ggml_backend_cpu_repack_buffer_typev")
REPACK_BUFT.restype = VP
GGML_TYPE_ID = {"q4_0": 2, "q5_0": 6, "q8_0": 8, "q2_K": 10, "q3_K": 11, "q4_K": 12, "q5_K": 13, "q6_K": 14}

rng = np.random.default_rng(0x78383620)

# name: (block elements, block bytes, activation type, half-scale offsets)
WEIGHTS = {
    "q4_0": (32, 18, "q8_0", [0]),
    "q4_1": (32, 20, "q8_1", [0, 2]),
    "q5_0": (32, 22, "q8_0", [0]),
    "q5_1": (32, 24, "q8_1", [0, 2]),
    "q8_0": (32, 34, "q8_0", [0]),
    "q2_K": (256, 84, "q8_K", [80, 82]),
    "q3_K": (256, 110, "q8_K", [108]),
    "q4_K": (256, 144, "q8_K", [0, 2]),
    "q5_K": (256, 176, "q8_K", [0, 2]),
    "q6_K": (256, 210, "q8_K", [208]),
}
ACT = {"q8_0": (32, 34), "q8_1": (32, 36), "q8_K": (256, 292)}


def ggml_quantize(ty, x):
    bs, ts = ACT[ty]
    out = (ctypes.c_uint8 * (len(x) // bs * ts))()
    xs = np.ascontiguousarray(x, dtype=np.float32)
    getattr(cpu, f"quantize_row_{ty}")(xs.ctypes.data_as(ctypes.c_void_p), out, ctypes.c_int64(len(x)))
    return bytes(out)


def ggml_dot(wty, n, w, a):
    s = ctypes.c_float(0)
    fn = getattr(cpu, f"ggml_vec_dot_{wty}_{WEIGHTS[wty][2]}")
    fn(ctypes.c_int(n), ctypes.byref(s), ctypes.c_size_t(0), w, ctypes.c_size_t(0), a, ctypes.c_size_t(0), ctypes.c_int(1))
    return np.float32(s.value)


def ggml_mul_mat(wty, w_bytes, rows, k, x, repack):
    """ggml_mul_mat(w, x) for an f32 x of ntok rows; w in the CPU_REPACK
    buffer when `repack` (as llama.cpp loads weights), else in plain memory."""
    ntok = x.shape[0]
    wctx = base.ggml_init(InitParams(1 << 20, None, repack))
    w = base.ggml_new_tensor_2d(wctx, GGML_TYPE_ID[wty], k, rows)
    if repack:
        assert base.ggml_backend_alloc_ctx_tensors_from_buft(wctx, REPACK_BUFT())
        wb = ctypes.create_string_buffer(w_bytes, len(w_bytes))
        base.ggml_backend_tensor_set(w, wb, 0, len(w_bytes))
    else:
        ctypes.memmove(base.ggml_get_data(w), w_bytes, len(w_bytes))
    ctx = base.ggml_init(InitParams(64 << 20, None, False))
    xt = base.ggml_new_tensor_2d(ctx, 0, k, ntok)
    xs = np.ascontiguousarray(x, dtype=np.float32)
    ctypes.memmove(base.ggml_get_data(xt), xs.ctypes.data, xs.nbytes)
    y = base.ggml_mul_mat(ctx, w, xt)
    graph = base.ggml_new_graph(ctx)
    base.ggml_build_forward_expand(graph, y)
    cpu.ggml_graph_compute_with_ctx(ctx, graph, 2)
    out = ctypes.cast(base.ggml_get_data(y), ctypes.POINTER(ctypes.c_float * (ntok * rows))).contents
    res = np.frombuffer(bytes(out), dtype=np.float32).copy()
    base.ggml_free(ctx)
    base.ggml_free(wctx)
    return res


def random_weights(wty, nblocks):
    """Random block bytes with sane half scales (K-quant scale bytes stay random)."""
    bs, ts, _, halves = WEIGHTS[wty]
    w = rng.integers(0, 256, size=(nblocks, ts), dtype=np.uint8)
    for off in halves:
        mag = np.exp2(rng.uniform(-10, -2, size=nblocks)) * rng.choice([-1.0, 1.0], size=nblocks)
        w[:, off:off + 2] = mag.astype(np.float16).view(np.uint8).reshape(nblocks, 2)
    return bytes(w.reshape(-1))


# (weight type, k, weight rows, tokens, repack): the batch shapes that pick
# each of ggml's kernel families on AVX2.
MATMULS = [
    ("q4_K", 512, 16, 1, True),   # repacked gemv
    ("q4_K", 512, 16, 7, True),   # repacked gemm for 4 rows, gemv for 3
    ("q4_K", 512, 12, 9, False),  # rows % 8 != 0: not repacked, tiled
    ("q4_K", 512, 12, 3, False),  # not repacked, vec_dot
    ("q6_K", 512, 16, 9, False),  # tiled
    ("q6_K", 512, 16, 3, False),  # vec_dot
    ("q5_K", 512, 16, 9, False),
    ("q3_K", 512, 16, 9, False),
    ("q2_K", 512, 16, 9, False),
    ("q4_0", 256, 16, 1, True),   # repacked gemv
    ("q4_0", 256, 16, 7, True),   # repacked gemm + gemv
    ("q8_0", 256, 16, 9, False),  # llamafile sgemm
    ("q5_0", 256, 16, 9, False),
]


def activations(n):
    x = rng.normal(size=n).astype(np.float32)
    x *= np.repeat(np.exp2(rng.uniform(-6, 6, size=n // 32)), 32).astype(np.float32)
    return x


def f32_line(v):
    return "f32 " + " ".join(f"{b:08x}" for b in np.asarray(v, dtype=np.float32).reshape(-1).view(np.uint32))


def main():
    print("# generated by scripts/quant/gen_ggml_x86_fixtures.py from a GGML_NATIVE (AVX2) libggml-cpu.so")
    ties = np.zeros(32, dtype=np.float32)
    ties[:6] = [127.0, 2.5, -2.5, 0.5, -0.5, 3.5]
    for ty, n in [("q8_0", 128), ("q8_1", 128), ("q8_K", 512)]:
        x = activations(n)
        x[-32:] = ties  # exact ties: x86 rounds half to even
        print(f"case quant {ty} {n}")
        print(f32_line(x))
        print("bytes " + ggml_quantize(ty, x).hex())
    for wty, (bs, ts, aty, halves) in WEIGHTS.items():
        nb = 3 if bs == 32 else 2
        n = nb * bs
        w = rng.integers(0, 256, size=(nb, ts), dtype=np.uint8)
        for off in halves:
            mag = np.exp2(rng.uniform(-10, -2, size=nb)) * rng.choice([-1.0, 1.0], size=nb)
            w[:, off:off + 2] = mag.astype(np.float16).view(np.uint8).reshape(nb, 2)
        wb = bytes(w.reshape(-1))
        a = ggml_quantize(aty, activations(n))
        print(f"case dot {wty} {n}")
        print("bytes " + wb.hex())
        print("bytes " + a.hex())
        print(f32_line([ggml_dot(wty, n, wb, a)]))
    for wty, k, rows, ntok, repack in MATMULS:
        bs = WEIGHTS[wty][0]
        wb = random_weights(wty, rows * k // bs)
        x = activations(ntok * k).reshape(ntok, k)
        print(f"case matmul {wty} {k} {rows} {ntok} {int(repack)}")
        print("bytes " + wb.hex())
        print(f32_line(x))
        print(f32_line(ggml_mul_mat(wty, wb, rows, k, x, repack)))


if __name__ == "__main__":
    main()
