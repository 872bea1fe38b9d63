/*
 * The instruction sets of qmoe's kernels: the one list. Adding an instruction set is its kernel
 * files (src/kernels/...<suffix>.c, defining qmoe_isa_<name>; the test
 * tests/test_kernel_<suffix>.c) plus one entry here, with its value in the public enum qmoe_kernel (include/qmoe/qmoe.h, which
 * cannot include this file). From the list come the kernel registry and AUTO's order
 * (registry.c), the names, the CPU checks (cpu_features.c), the check that the enum and the list
 * agree (registry.c), and the compiler flags, the compiler probes and QMOE_HAVE_<SET>
 * (cmake/qmoe_isa.cmake reads this file). Python, the CLI and the tests ask the library for the
 * names.
 *
 * A kernel entry: ISA(SET, name, arch, suffix, needs, eltwise, (check), "flags", "gnu", "probe")
 *   SET      QMOE_KERNEL_<SET> (public enum) and QMOE_HAVE_<SET> (1: this build compiled it)
 *   name     the kernel's name (qmoe_kernel_name, QMOE_ISA, the CLI) and its GEMM table
 *            qmoe_isa_<name> (kernels/gmm_fast.h)
 *   arch     x86_64 or aarch64: the only architecture the set is compiled for
 *   suffix   its files: ..._<suffix>.c get the flags and are compiled only when the set is
 *   needs    the set (a kernel or a BASE entry) whose pieces its files reuse: NONE, or a SET
 *            compiled first (its flags come first, and without it this one is not compiled)
 *   eltwise  its element-wise routines qmoe_eltwise_<eltwise> (kernels/kernel.h)
 *   check    whether this CPU runs it: an expression over the CPU facts cpu_features.c reads
 *            (CPUID registers and XCR0 on x86-64, the hwcaps on aarch64) and CPU_RUNS(SET)
 *   flags    compiler flags of its files, after those of `needs`; gnu: more for GCC only
 *   probe    the body of main() that must compile with the flags (an intrinsic only the set
 *            has) for the build to take the set
 * A BASE entry has the same fields for a set of files that is no kernel of its own (eltwise
 * and check unused).
 *
 * Entries of one architecture are in AUTO's order, fastest first; below them come the
 * portable kernel and the reference kernel, which every build has and which are not listed.
 * Fields are separated by commas, each entry's strings hold no quote; cmake reads the file.
 */
#ifndef QMOE_KERNELS_ISA_LIST_H
#define QMOE_KERNELS_ISA_LIST_H

#define QMOE_ISA_LIST(ISA, BASE)                                                                  \
    /* AMX tiles for blocks of 16 rows and more; the AVX-512 VNNI table below (its few_rows) */   \
    ISA(AMX_INT8, amx_int8, x86_64, amx, AVX512_VNNI, avx512,                                     \
        (CPU_RUNS(AVX512_VNNI) && X86_TILE_STATE && X86_BIT(l7_edx, 24) /* AMX-TILE */ &&        \
         X86_BIT(l7_edx, 25) /* AMX-INT8 */ && X86_AMX_PERMITTED),                              \
        "-mamx-tile -mamx-int8", "",                                                              \
        "_tile_zero(0); _tile_dpbssd(0, 1, 2); _tile_release(); return 0;")                       \
    ISA(AVX512_VNNI, avx512_vnni, x86_64, avx512vnni, NONE, avx512,                               \
        (X86_AVX512 && X86_BIT(l7_ecx, 11) /* AVX512_VNNI */),                                   \
        "-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mfma -mf16c", "",              \
        "__m512i a = _mm512_set1_epi8(1);"                                                        \
        " a = _mm512_dpbusd_epi32(a, a, a); return _mm512_reduce_add_epi32(a);")                  \
    ISA(AVX_VNNI, avx_vnni, x86_64, avxvnni, AVX2, avx2,                                          \
        (CPU_RUNS(AVX2) && X86_BIT(l71_eax, 4) /* AVX-VNNI */),                                  \
        "-mavxvnni", "",                                                                          \
        "__m256i a = _mm256_set1_epi8(1);"                                                        \
        " a = _mm256_dpbusd_avx_epi32(a, a, a); return _mm256_extract_epi32(a, 0);")              \
    ISA(AVX2, avx2, x86_64, avx2, NONE, avx2,                                                     \
        (X86_YMM_STATE && X86_BIT(l1_ecx, 12) /* FMA */ && X86_BIT(l1_ecx, 29) /* F16C */ &&     \
         X86_BIT(l7_ebx, 5) /* AVX2 */),                                                         \
        "-mavx2 -mfma -mf16c", "",                                                                \
        "__m256i a = _mm256_set1_epi16(1); a = _mm256_madd_epi16(a, a);"                          \
        " __m256 f = _mm256_fmadd_ps(_mm256_set1_ps(1.f), _mm256_set1_ps(2.f),"                   \
        " _mm256_set1_ps(3.f)); return _mm256_extract_epi32(a, 0) + (int)_mm256_cvtss_f32(f);")  \
    /* every CPU with I8MM has the dot product too (ARMv8.6): the check relies on it. GCC's      \
     * pre-allocation scheduling spills both ARM kernels' 24 live accumulator tiles. */           \
    ISA(NEON_I8MM, neon_i8mm, aarch64, i8mm, NEON, neon,                                          \
        (CPU_RUNS(NEON_DOT) && ARM_HWCAP2(13) /* I8MM */),                                       \
        "-march=armv8.2-a+dotprod+i8mm", "-fno-schedule-insns",                                   \
        "uint8x16_t a = vdupq_n_u8(1); int8x16_t b = vdupq_n_s8(1);"                              \
        " int32x4_t c = vusmmlaq_s32(vdupq_n_s32(0), a, b); return vgetq_lane_s32(c, 0);")        \
    ISA(NEON_DOT, neon_dot, aarch64, neondot, NEON, neon,                                         \
        (ARM_HWCAP(20) /* ASIMDDP */),                                                           \
        "-march=armv8.2-a+dotprod", "-fno-schedule-insns",                                        \
        "int8x16_t a = vdupq_n_s8(1);"                                                            \
        " int32x4_t c = vdotq_laneq_s32(vdupq_n_s32(0), a, a, 1); return vgetq_lane_s32(c, 0);")  \
    /* base NEON (pack and epilogue of both ARM tables): the epilogue's float steps must not be  \
     * contracted into fused multiply-adds where the portable code rounds twice */                \
    BASE(NEON, neon, aarch64, neon, NONE, none, (1), "-ffp-contract=off", "",                     \
         "float32x4_t f = vrndnq_f32(vdivq_f32(vdupq_n_f32(3.f), vdupq_n_f32(2.f)));"             \
         " return (int)vmaxvq_f32(vmaxnmq_f32(f, f));")

/* An expander that drops an entry: QMOE_ISA_LIST(X, QMOE_ISA_SKIP) visits the kernels alone. */
#define QMOE_ISA_SKIP(SET, name, arch, suffix, needs, eltwise, check, flags, gnu, probe)

#endif
