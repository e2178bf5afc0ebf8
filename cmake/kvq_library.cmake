# kvq_library(NAME DEPS...): builds src/kvq/NAME/**.cc into the static library kvq_NAME.
#
# The build enforces the layering (docs/design.md §2): a library sees the headers of its own
# folder and of the DEPS it names, nothing else. Its include root is a staged folder
# build/include/NAME/ holding kvq/NAME and kvq/DEP as links to src/kvq/..., so an include of a
# library above it ("kvq/eval/..." from model/) fails to compile. DEPS must list every library
# whose headers NAME includes, directly or through another header (the lists in CMakeLists.txt are
# transitive). Dependents inherit the staged roots of what they link (PUBLIC).
function(kvq_library name)
  set(dir ${PROJECT_SOURCE_DIR}/src/kvq/${name})
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${dir}/*.cc)
  if(NOT sources)
    set(sources ${PROJECT_SOURCE_DIR}/cmake/empty.cc)
  endif()
  add_library(kvq_${name} STATIC ${sources})
  set(stage ${PROJECT_BINARY_DIR}/include/${name})
  file(MAKE_DIRECTORY ${stage}/kvq)
  foreach(visible IN ITEMS ${name} ${ARGN})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/kvq/${visible} ${stage}/kvq/${visible} SYMBOLIC)
  endforeach()
  target_include_directories(kvq_${name} PUBLIC ${stage})
  target_link_libraries(kvq_${name} PRIVATE kvq_warnings)
  foreach(dep IN LISTS ARGN)
    target_link_libraries(kvq_${name} PUBLIC kvq_${dep})
  endforeach()
  target_link_libraries(kvq_${name} PUBLIC
    OpenMP::OpenMP_CXX nlohmann_json::nlohmann_json fmt::fmt yaml-cpp PkgConfig::PCRE2
    PkgConfig::OPENBLAS)
endfunction()
