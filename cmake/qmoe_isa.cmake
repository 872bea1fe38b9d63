# Per-instruction-set compile flags, by file-name suffix. Only x86-64 has these kernels; on other
# machines such files are dropped and the portable kernels serve.
set(QMOE_X86 OFF)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64")
  set(QMOE_X86 ON)
endif()

function(qmoe_apply_isa_flags sources)
  foreach(src ${sources})
    if(src MATCHES "_amx\\.c$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS
        "-mamx-tile;-mamx-int8;-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mfma;-mf16c")
    elseif(src MATCHES "_avx512vnni\\.c$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS
        "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mfma;-mf16c")
    elseif(src MATCHES "_avxvnni\\.c$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "-mavx2;-mavxvnni;-mfma;-mf16c")
    elseif(src MATCHES "_avx2\\.c$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
    endif()
  endforeach()
endfunction()
