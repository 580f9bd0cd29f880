// read_file and write_file_atomic: errors name the path and reason; nothing half-written is left behind.
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/io_test_util.h"
#include "sparse24/io.h"

namespace sparse24 {
namespace {

using testing::TempDir;

TEST(File, ReadMissingFileNamesPathAndReason) {
  TempDir dir;
  const std::string path = dir.file("missing.bin");
  EXPECT_ERROR(read_file(path), "cannot open '" + path + "': No such file or directory");
}

TEST(File, ReadDirectoryIsRefused) {
  TempDir dir;
  EXPECT_ERROR(read_file(dir.path().string()), "is not a regular file");
}

TEST(File, WriteThenReadRoundTrips) {
  TempDir dir;
  const std::string path = dir.file("a.bin");
  std::vector<uint8_t> bytes = {0, 1, 2, 255, 0, 7};
  write_file_atomic(path, bytes);
  EXPECT_EQ(read_file(path), bytes);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"a.bin"});  // no temporary file remains
}

TEST(File, EmptyFileRoundTrips) {
  TempDir dir;
  const std::string path = dir.file("empty");
  write_file_atomic(path, std::vector<uint8_t>{});
  EXPECT_TRUE(read_file(path).empty());
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"empty"});
}

TEST(File, OverwriteReplacesWholeContent) {
  TempDir dir;
  const std::string path = dir.file("a.txt");
  write_file_atomic(path, std::string_view("a long first version"));
  write_file_atomic(path, std::string_view("short"));
  EXPECT_EQ(read_file(path), testing::to_bytes("short"));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"a.txt"});
}

TEST(File, WriteIntoMissingDirectoryThrowsAndLeavesNothing) {
  TempDir dir;
  const std::string path = dir.file("no-such-dir/a.bin");
  EXPECT_ERROR(write_file_atomic(path, std::string_view("x")), "cannot write '" + path + "': No such file");
  EXPECT_TRUE(dir.entries().empty());
}

TEST(File, RenameFailureRemovesTemporaryFile) {
  // Renaming a file over a non-empty directory fails after the temporary file has been written.
  TempDir dir;
  const std::string path = dir.file("occupied");
  std::filesystem::create_directory(path);
  std::ofstream(dir.file("occupied/keep")) << "x";
  EXPECT_ERROR(write_file_atomic(path, std::string_view("data")), "rename");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"occupied"});
}

TEST(File, WriteFailureRemovesTemporaryFile) {
  // A file size limit makes write() fail with EFBIG part-way through (SIGXFSZ ignored so it returns an
  // error).
  TempDir dir;
  const std::string path = dir.file("big.bin");
  write_file_atomic(path, std::string_view("old content"));
  struct rlimit old_limit {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  bool threw = false;
  std::string message;
  try {
    write_file_atomic(path, std::vector<uint8_t>(100000, 1));
  } catch (const Error& e) {
    threw = true;
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(threw);
  EXPECT_NE(message.find("cannot write '" + path + "': write: File too large"), std::string::npos) << message;
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"big.bin"});  // the temporary file is gone
  EXPECT_EQ(read_file(path), testing::to_bytes("old content"));   // and the old file untouched
}

TEST(File, UnwritableDirectoryThrowsAndLeavesNothing) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  TempDir dir;
  std::filesystem::create_directory(dir.file("ro"));
  ::chmod(dir.file("ro").c_str(), 0555);
  EXPECT_ERROR(write_file_atomic(dir.file("ro/a.bin"), std::string_view("x")), "Permission denied");
  ::chmod(dir.file("ro").c_str(), 0755);
  EXPECT_TRUE(std::filesystem::is_empty(dir.file("ro")));
}

}  // namespace
}  // namespace sparse24
