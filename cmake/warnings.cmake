# Warnings are errors for kvq's own code.
add_library(kvq_warnings INTERFACE)
target_compile_options(kvq_warnings INTERFACE
  -Wall -Wextra -Werror -Wshadow=local -Wnon-virtual-dtor -Wno-missing-field-initializers)
