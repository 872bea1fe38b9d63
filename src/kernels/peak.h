/*
 * Peak probes: `iters` rounds of an instruction set's int8 dot-product instruction on independent
 * register accumulators, returning the int8 operations done (2 per multiply-add); the benchmark's
 * "% of peak" divides by their rate (gmm_fast.h's peak_loop points at them).
 *
 * The vector loops are inline assembly: written in C, equal accumulators with equal updates were
 * merged by the compiler (gcc 12 kept one vpdpbusd of the twelve counted), so the probe ran at the
 * instruction's latency and claimed up to 12x the work. Each probe's count per round below is
 * what tests/test_peak_loops.c finds in its compiled loop; the chains are enough to cover the
 * instruction's latency x issue rate on the CPUs its file names.
 */
#ifndef QMOE_KERNELS_PEAK_H
#define QMOE_KERNELS_PEAK_H

#include <stdint.h>

/* Dot-product instructions per loop round, and int8 operations per instruction. */
enum {
    QMOE_PEAK_AVX512_VNNI_DOTS = 16, /* vpdpbusd zmm: 64 multiply-adds */
    QMOE_PEAK_AVX512_VNNI_OPS = 128,
    QMOE_PEAK_AVX_VNNI_DOTS = 12, /* {vex} vpdpbusd ymm: 32 multiply-adds */
    QMOE_PEAK_AVX_VNNI_OPS = 64,
    QMOE_PEAK_AVX2_DOTS = 6, /* vpmaddubsw ymm (+ vpaddw): 32 multiply-adds */
    QMOE_PEAK_AVX2_OPS = 64,
    QMOE_PEAK_AMX_DOTS = 6, /* tdpbsud, 16 x 16 x 64: 16384 multiply-adds */
    QMOE_PEAK_AMX_OPS = 32768,
    QMOE_PEAK_NEON_DOT_DOTS = 16, /* sdot 4s: 16 multiply-adds */
    QMOE_PEAK_NEON_DOT_OPS = 32,
    QMOE_PEAK_NEON_I8MM_DOTS = 16, /* usmmla 2x8 . 8x2: 32 multiply-adds */
    QMOE_PEAK_NEON_I8MM_OPS = 64,
    QMOE_PEAK_PORTABLE_MACS = 16, /* scalar multiply-adds per round, written out */
};

uint64_t qmoe_peak_portable(uint64_t iters);
#if defined(__x86_64__) || defined(_M_X64)
uint64_t qmoe_peak_avx512vnni(uint64_t iters);
uint64_t qmoe_peak_avxvnni(uint64_t iters);
uint64_t qmoe_peak_avx2(uint64_t iters);
#endif
#if defined(__aarch64__)
uint64_t qmoe_peak_neondot(uint64_t iters);
uint64_t qmoe_peak_i8mm(uint64_t iters);
#endif

#endif
