// Reading a whole input file: the one place kvq does it, so every input gets the same checks.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace kvq::io {

// The file's bytes, as they are (no newline conversion). IoError naming the path — and `what` it
// was meant to be ("the calibration dataset"), when given — when it does not exist, is not a
// regular file (a directory, or a FIFO or device that could block or never end), or cannot be
// read.
std::string read_file(const std::filesystem::path& path, std::string_view what = "");

}  // namespace kvq::io
