// Helpers for the safetensors tests: a scratch directory and raw file images built byte by byte.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <string_view>

#include "io/safetensors.h"
#include "temp_dir.h"

namespace mla::testing_io {

// A scratch directory per test (tests/common/temp_dir.h).
struct TempDir : test::TempDir {
  TempDir() : test::TempDir("mla_io") {}
};

inline std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = char(uint8_t(v >> (8 * i)));
  return s;
}

// length prefix + header + data, exactly as given (no padding added).
inline std::string image(std::string_view header, std::string_view data = {}) {
  return le64(header.size()) + std::string(header) + std::string(data);
}

inline void write_bytes(const std::string& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(f.good()) << "cannot write " << path;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Success when `s` is an error with `code` and a one-line message holding `path` and every one of
// `needles`.
inline ::testing::AssertionResult failed_with(const Status& s, StatusCode code,
                                              const std::string& path,
                                              std::initializer_list<std::string_view> needles) {
  if (s.ok()) return ::testing::AssertionFailure() << "expected an error, got OK";
  auto fail = ::testing::AssertionFailure();
  bool bad = false;
  if (s.code() != code) {
    fail << "code " << status_code_name(s.code()) << ", expected " << status_code_name(code)
         << "; ";
    bad = true;
  }
  if (s.message().find(path) == std::string::npos) {
    fail << "message does not name the path; ";
    bad = true;
  }
  for (std::string_view n : needles) {
    if (s.message().find(n) == std::string::npos) {
      fail << "message lacks [" << n << "]; ";
      bad = true;
    }
  }
  if (s.message().find('\n') != std::string::npos) {
    fail << "message spans lines; ";
    bad = true;
  }
  if (bad) return fail << "status: " << s.to_string();
  return ::testing::AssertionSuccess() << s.to_string();
}

template <typename T>
::testing::AssertionResult failed_with(const Result<T>& r, StatusCode code, const std::string& path,
                                       std::initializer_list<std::string_view> needles) {
  if (r.ok()) return ::testing::AssertionFailure() << "expected an error, got OK";
  return failed_with(r.status(), code, path, needles);
}

// `"name":{"dtype":...,"shape":...,"data_offsets":...}` with the JSON fragments as given.
inline std::string entry(std::string_view name, std::string_view dtype, std::string_view shape,
                         std::string_view offsets) {
  return "\"" + std::string(name) + "\":{\"dtype\":" + std::string(dtype) +
         ",\"shape\":" + std::string(shape) + ",\"data_offsets\":" + std::string(offsets) + "}";
}

// A test that writes one file per case and opens it.
class SafetensorsFileTest : public ::testing::Test {
 protected:
  Result<SafetensorsFile> open_bytes(std::string_view bytes) {
    write_bytes(path_, bytes);
    return SafetensorsFile::open(path_);
  }
  // A header body wrapped in {} with `data` after it.
  Result<SafetensorsFile> open_header(std::string_view body, std::string_view data = {}) {
    return open_bytes(image("{" + std::string(body) + "}", data));
  }

  TempDir dir_;
  const std::string path_ = dir_.file("model.safetensors");
};

}  // namespace mla::testing_io
