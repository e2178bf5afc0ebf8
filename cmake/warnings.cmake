# Warnings are errors for kvq's own code. (clang, used only by the fuzz preset, spells GCC's
# -Wshadow=local as -Wshadow-uncaptured-local.)
add_library(kvq_warnings INTERFACE)
target_compile_options(kvq_warnings INTERFACE
  -Wall -Wextra -Werror $<IF:$<CXX_COMPILER_ID:GNU>,-Wshadow=local,-Wshadow-uncaptured-local>
  -Wnon-virtual-dtor -Wno-missing-field-initializers)
