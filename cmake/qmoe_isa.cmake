# Per-instruction-set kernels, by file-name suffix (x86-64: *_avx2.c, *_avxvnni.c, *_avx512vnni.c,
# *_amx.c; aarch64: *_neon.c, *_neondot.c, *_i8mm.c): each gets its set's compiler flags, and only
# where the target architecture is the set's and this compiler takes them (checked once, with the
# intrinsics the kernels use). Files of a set that is not
# available are left out of the build, and every source sees QMOE_HAVE_<SET> (0 or 1), so the
# registry lists only the kernels that were compiled; the portable kernel builds everywhere.
include(CheckCSourceCompiles)

set(QMOE_ISA_FLAGS_AVX2 "-mavx2;-mfma;-mf16c")
set(QMOE_ISA_FLAGS_AVX_VNNI "-mavx2;-mavxvnni;-mfma;-mf16c")
set(QMOE_ISA_FLAGS_AVX512_VNNI "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mfma;-mf16c")
set(QMOE_ISA_FLAGS_AMX_INT8 "-mamx-tile;-mamx-int8;${QMOE_ISA_FLAGS_AVX512_VNNI}")
# aarch64: NEON is part of the base architecture; the epilogue's float steps must not be contracted
# into fused multiply-adds where the portable code has separate roundings (-ffp-contract=off).
set(QMOE_ISA_FLAGS_NEON "-ffp-contract=off")
set(QMOE_ISA_FLAGS_NEON_DOT "-march=armv8.2-a+dotprod;-ffp-contract=off")
set(QMOE_ISA_FLAGS_NEON_I8MM "-march=armv8.2-a+dotprod+i8mm;-ffp-contract=off")
if(CMAKE_C_COMPILER_ID STREQUAL "GNU")
  # GCC's pre-allocation scheduling hoists the next steps' weight loads and spills accumulators
  # in both micro-kernels (24 live tiles); without it their loops have no stack traffic.
  list(APPEND QMOE_ISA_FLAGS_NEON_DOT -fno-schedule-insns)
  list(APPEND QMOE_ISA_FLAGS_NEON_I8MM -fno-schedule-insns)
endif()

# One probe per set: the flags and an intrinsic only that set has, on the set's architecture.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64")
  set(QMOE_ISA_ARCH x86_64)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64|ARM64")
  set(QMOE_ISA_ARCH aarch64)
else()
  set(QMOE_ISA_ARCH other)
endif()
function(qmoe_isa_probe var flags body)
  if(DEFINED ${var})
    return()
  endif()
  if(var MATCHES "NEON")
    set(arch aarch64)
    set(header arm_neon.h)
  else()
    set(arch x86_64)
    set(header immintrin.h)
  endif()
  if(NOT QMOE_ISA_ARCH STREQUAL arch)
    set(${var} 0 CACHE INTERNAL "")
    return()
  endif()
  string(REPLACE ";" " " CMAKE_REQUIRED_FLAGS "${flags}")
  set(CMAKE_REQUIRED_QUIET ON)
  check_c_source_compiles("#include <${header}>
int main(void) { ${body} }" ${var}_PROBE)
  if(${var}_PROBE)
    set(${var} 1 CACHE INTERNAL "")
  else()
    set(${var} 0 CACHE INTERNAL "")
  endif()
endfunction()

qmoe_isa_probe(QMOE_HAVE_AVX2 "${QMOE_ISA_FLAGS_AVX2}"
  "__m256i a = _mm256_set1_epi16(1); a = _mm256_madd_epi16(a, a);
   __m256 f = _mm256_fmadd_ps(_mm256_set1_ps(1.f), _mm256_set1_ps(2.f), _mm256_set1_ps(3.f));
   return _mm256_extract_epi32(a, 0) + (int)_mm256_cvtss_f32(f);")
qmoe_isa_probe(QMOE_HAVE_AVX_VNNI "${QMOE_ISA_FLAGS_AVX_VNNI}"
  "__m256i a = _mm256_set1_epi8(1);
   a = _mm256_dpbusd_avx_epi32(a, a, a); return _mm256_extract_epi32(a, 0);")
qmoe_isa_probe(QMOE_HAVE_AVX512_VNNI "${QMOE_ISA_FLAGS_AVX512_VNNI}"
  "__m512i a = _mm512_set1_epi8(1);
   a = _mm512_dpbusd_epi32(a, a, a); return _mm512_reduce_add_epi32(a);")
qmoe_isa_probe(QMOE_HAVE_AMX_INT8 "${QMOE_ISA_FLAGS_AMX_INT8}"
  "_tile_zero(0); _tile_dpbssd(0, 1, 2); _tile_release(); return 0;")
qmoe_isa_probe(QMOE_HAVE_NEON "${QMOE_ISA_FLAGS_NEON}"
  "float32x4_t f = vrndnq_f32(vdivq_f32(vdupq_n_f32(3.f), vdupq_n_f32(2.f)));
   return (int)vmaxvq_f32(vmaxnmq_f32(f, f));")
qmoe_isa_probe(QMOE_HAVE_NEON_DOT "${QMOE_ISA_FLAGS_NEON_DOT}"
  "int8x16_t a = vdupq_n_s8(1);
   int32x4_t c = vdotq_laneq_s32(vdupq_n_s32(0), a, a, 1); return vgetq_lane_s32(c, 0);")
qmoe_isa_probe(QMOE_HAVE_NEON_I8MM "${QMOE_ISA_FLAGS_NEON_I8MM}"
  "uint8x16_t a = vdupq_n_u8(1); int8x16_t b = vdupq_n_s8(1);
   int32x4_t c = vusmmlaq_s32(vdupq_n_s32(0), a, b); return vgetq_lane_s32(c, 0);")
# The NEON dot-product and I8MM tables use the NEON epilogue.
if(NOT QMOE_HAVE_NEON)
  set(QMOE_HAVE_NEON_DOT 0 CACHE INTERNAL "" FORCE)
  set(QMOE_HAVE_NEON_I8MM 0 CACHE INTERNAL "" FORCE)
endif()
# The AVX-VNNI table reuses the AVX2 epilogue; the AMX table falls to AVX-512 VNNI below 16 rows.
if(NOT QMOE_HAVE_AVX2)
  set(QMOE_HAVE_AVX_VNNI 0 CACHE INTERNAL "" FORCE)
endif()
if(NOT QMOE_HAVE_AVX512_VNNI)
  set(QMOE_HAVE_AMX_INT8 0 CACHE INTERNAL "" FORCE)
endif()
set(QMOE_ISA_DEFINITIONS
  QMOE_HAVE_AVX2=${QMOE_HAVE_AVX2} QMOE_HAVE_AVX_VNNI=${QMOE_HAVE_AVX_VNNI}
  QMOE_HAVE_AVX512_VNNI=${QMOE_HAVE_AVX512_VNNI} QMOE_HAVE_AMX_INT8=${QMOE_HAVE_AMX_INT8}
  QMOE_HAVE_NEON=${QMOE_HAVE_NEON} QMOE_HAVE_NEON_DOT=${QMOE_HAVE_NEON_DOT}
  QMOE_HAVE_NEON_I8MM=${QMOE_HAVE_NEON_I8MM})
if(NOT QMOE_ISA_REPORTED)
  set(QMOE_ISA_REPORTED ON CACHE INTERNAL "")
  message(STATUS "qmoe kernels compiled: portable"
    " avx2=${QMOE_HAVE_AVX2} avx_vnni=${QMOE_HAVE_AVX_VNNI}"
    " avx512_vnni=${QMOE_HAVE_AVX512_VNNI} amx_int8=${QMOE_HAVE_AMX_INT8}"
    " neon=${QMOE_HAVE_NEON} neon_dot=${QMOE_HAVE_NEON_DOT} neon_i8mm=${QMOE_HAVE_NEON_I8MM}")
endif()

# Flags for the files of available sets; the others are not compiled (HEADER_FILE_ONLY keeps them
# listed); QMOE_HAVE_* for every file. Source properties are per directory: call this where the
# target that compiles `sources` is defined.
function(qmoe_apply_isa_flags sources)
  foreach(src ${sources})
    set(isa "")
    if(src MATCHES "_i8mm\\.c$")
      set(isa NEON_I8MM)
    elseif(src MATCHES "_neondot\\.c$")
      set(isa NEON_DOT)
    elseif(src MATCHES "_neon\\.c$")
      set(isa NEON)
    elseif(src MATCHES "_amx\\.c$")
      set(isa AMX_INT8)
    elseif(src MATCHES "_avx512vnni\\.c$")
      set(isa AVX512_VNNI)
    elseif(src MATCHES "_avxvnni\\.c$")
      set(isa AVX_VNNI)
    elseif(src MATCHES "_avx2\\.c$")
      set(isa AVX2)
    endif()
    set_property(SOURCE ${src} APPEND PROPERTY COMPILE_DEFINITIONS ${QMOE_ISA_DEFINITIONS})
    if(isa AND QMOE_HAVE_${isa})
      set_property(SOURCE ${src} APPEND PROPERTY COMPILE_OPTIONS ${QMOE_ISA_FLAGS_${isa}})
    elseif(isa)
      set_property(SOURCE ${src} PROPERTY HEADER_FILE_ONLY ON)
    endif()
  endforeach()
endfunction()
