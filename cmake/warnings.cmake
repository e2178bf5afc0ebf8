# Warnings are errors for kvq's own code.
add_library(kvq_warnings INTERFACE)
target_compile_options(kvq_warnings INTERFACE
  -Wall -Wextra -Werror -Wnon-virtual-dtor -Wno-missing-field-initializers)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(kvq_warnings INTERFACE -Wshadow=local)
else()  # clang (the fuzz preset) spells it differently
  target_compile_options(kvq_warnings INTERFACE -Wshadow-uncaptured-local)
endif()
