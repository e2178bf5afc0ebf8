# kvq_library(NAME DEPS...): builds src/kvq/NAME/**.cc into the static library kvq_NAME.
# Dependencies point one way (docs/design.md §2): a wrong include fails at link time.
function(kvq_library name)
  set(dir ${PROJECT_SOURCE_DIR}/src/kvq/${name})
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${dir}/*.cc)
  if(NOT sources)
    set(sources ${PROJECT_SOURCE_DIR}/cmake/empty.cc)
  endif()
  add_library(kvq_${name} STATIC ${sources})
  target_include_directories(kvq_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(kvq_${name} PRIVATE kvq_warnings)
  foreach(dep IN LISTS ARGN)
    target_link_libraries(kvq_${name} PUBLIC kvq_${dep})
  endforeach()
  target_link_libraries(kvq_${name} PUBLIC
    OpenMP::OpenMP_CXX nlohmann_json::nlohmann_json fmt::fmt yaml-cpp PkgConfig::PCRE2
    PkgConfig::OPENBLAS)
endfunction()
