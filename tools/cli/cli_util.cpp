// The out-of-line part of cli_util.h: the sha256 of an input file, recorded in results.
#include "cli_util.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include <openssl/evp.h>

namespace adagrouper::cli {

std::string sha256_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open file", path));
  std::ostringstream buf;
  buf << in.rdbuf();
  const std::string data = buf.str();
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error(fmt::format("{}: sha256 failed", path));
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

}  // namespace adagrouper::cli
