# All dependencies are Debian bookworm packages (scripts/setup.sh installs them); no downloads.
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(fmt REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
pkg_check_modules(CAIRO REQUIRED IMPORTED_TARGET cairo)  # report figures (PNG + SVG), src/kvq/plot
# HTTP server and client of `kvq serve` (src/kvq/serve); Debian's build is a compiled library.
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
add_library(kvq_cli11 INTERFACE)
target_include_directories(kvq_cli11 SYSTEM INTERFACE ${CLI11_INCLUDE_DIR})
