# Warnings are errors in every target of the project.
function(qmoe_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wvla>
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror>)
endfunction()
