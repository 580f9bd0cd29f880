// Whole-file reads, read-only mappings and atomic writes (POSIX: open/fstat/read/mmap, write/fsync/rename).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sparse24/error.h"
#include "sparse24/io.h"

namespace sparse24 {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

// Closes a descriptor on scope exit unless released.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes now and reports close()'s result (a deferred write error can surface here).
  int close() {
    int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

// The directory part of `path` ("." when there is none), for fsyncing the rename.
std::string dir_of(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

std::vector<uint8_t> read_file(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw Error("cannot open '" + path + "': " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw Error("cannot stat '" + path + "': " + errno_text(errno));
  // Devices and pipes have no size and may never end: only regular files are read.
  if (!S_ISREG(st.st_mode)) throw Error("'" + path + "' is not a regular file");
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("cannot read '" + path + "': " + errno_text(errno));
    if (n == 0) break;  // the file shrank while we read it: return what is there
    done += static_cast<size_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw Error("cannot open '" + path + "': " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw Error("cannot stat '" + path + "': " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) throw Error("'" + path + "' is not a regular file");
  if (st.st_size <= 0) return;  // mmap refuses length 0: an empty file is an empty span
  if (static_cast<uint64_t>(st.st_size) > SIZE_MAX) throw Error("'" + path + "' is too large to map");
  const size_t n = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, n, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (p == MAP_FAILED) throw Error("cannot map '" + path + "': " + errno_text(errno));
  data_ = static_cast<const uint8_t*>(p);
  size_ = n;
  // The mapping keeps the file alive; the descriptor closes here.
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() { reset(); }

void MappedFile::release(std::span<const uint8_t> part) const {
  if (part.empty() || part.data() < data_ || part.data() + part.size() > data_ + size_) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(part.data()) + page - 1) / page * page,
                  end = (reinterpret_cast<uintptr_t>(part.data()) + part.size()) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);  // advice only
}

void MappedFile::reset() noexcept {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_file_atomic(path, std::vector<std::string_view>{bytes});
}

void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces) {
  // pid + a per-process counter: unique across processes and across threads of this one.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);

  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.get() < 0) throw Error("cannot write '" + path + "': " + errno_text(errno));

  // From here on every failure removes the temporary file before throwing.
  auto fail = [&](const char* step, int err) {
    if (fd.get() >= 0) fd.close();
    ::unlink(tmp.c_str());
    throw Error("cannot write '" + path + "': " + step + ": " + errno_text(err));
  };
  for (const std::string_view bytes : pieces) {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("write", errno);
      done += static_cast<size_t>(n);
    }
  }
  if (::fsync(fd.get()) != 0) fail("fsync", errno);
  if (fd.close() != 0) fail("close", errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("rename", errno);

  // Make the rename itself durable. Best effort: some file systems refuse fsync on a directory, and the new
  // file is already complete and in place.
  int dir = ::open(dir_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    (void)::fsync(dir);
    ::close(dir);
  }
}

void write_file_atomic(const std::string& path, const std::vector<uint8_t>& bytes) {
  write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

}  // namespace sparse24
