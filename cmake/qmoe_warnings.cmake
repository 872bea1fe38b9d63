# Warnings are errors in every target of the project. Floating-point contraction is off, so no
# compiler or architecture fuses a*b+c where the spec rounds twice (identical bits everywhere).
function(qmoe_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wvla -ffp-contract=off>
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror -ffp-contract=off>)
endfunction()
