// Mapping freshly allocated memory before its first write.
//
// Note [Populated pages]
// A large graph's memory is touched once, page by page, and every first touch
// is a page fault: at a million nodes about a quarter of the CLI's time went
// to faults. MADV_POPULATE_WRITE (Linux 5.14) maps a range in one system
// call, without a fault's entry and exit per page, and two threads can map
// two halves of a range at once. Used for the node arena's chunks (Note [Node
// arena]), the buffer a file is read or inflated into, and simdjson's index
// and tape (Note [Populated tape] in src/json_io.cpp). Best effort: elsewhere, or
// on an older kernel, the pages fault in as before. The memory's contents are
// not changed (fresh pages are zero, as a fault would make them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <system_error>
#include <thread>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace fxremat {

#if defined(__linux__)
// madvise(advice) over the whole pages of [begin, begin + size); best effort.
inline void AdviseWholePages(void* begin, size_t size, int advice) {
  constexpr uintptr_t kPage = 4096;
  const uintptr_t first = (reinterpret_cast<uintptr_t>(begin) + kPage - 1) & ~(kPage - 1);
  const uintptr_t last = (reinterpret_cast<uintptr_t>(begin) + size) & ~(kPage - 1);
  if (last > first) (void)madvise(reinterpret_cast<void*>(first), last - first, advice);
}
#endif

// Maps the whole pages of [begin, begin + size).
inline void PopulatePages(void* begin, size_t size) {
#if defined(__linux__)
  constexpr int kMadvPopulateWrite = 23;  // MADV_POPULATE_WRITE, absent from older headers
  AdviseWholePages(begin, size, kMadvPopulateWrite);
#else
  (void)begin;
  (void)size;
#endif
}

// Gives the whole pages of [begin, begin + size) back to the system: their
// contents are lost (they read as zero if touched again), the memory stays
// allocated.
inline void ReleasePages(void* begin, size_t size) {
#if defined(__linux__)
  AdviseWholePages(begin, size, MADV_DONTNEED);
#else
  (void)begin;
  (void)size;
#endif
}

// Below this many bytes, memory is not worth another thread's mapping:
// starting a thread costs more than mapping it, and small graphs are read often.
inline constexpr size_t kMapOnAnotherThreadFrom = size_t{16} << 20;

// Runs fn(begin, end) over [0, size) in two halves, the second on another
// thread (this one's alone if none starts, or for a size under
// kMapOnAnotherThreadFrom); whether both halves returned true.
template <typename Fn>
bool SplitOverTwoThreads(size_t size, Fn&& fn) {
  if (size < kMapOnAnotherThreadFrom) return fn(size_t{0}, size);
  const size_t half = size / 2;
  bool second_ok = false;
  std::thread other;
  try {
    other = std::thread([&] { second_ok = fn(half, size); });
  } catch (const std::system_error&) {
    return fn(size_t{0}, size);
  }
  const bool first_ok = fn(size_t{0}, half);
  other.join();
  return first_ok && second_ok;
}

// PopulatePages, the second half on another thread (as SplitOverTwoThreads).
inline void PopulatePagesOnTwoThreads(void* begin, size_t size) {
  std::byte* const bytes = static_cast<std::byte*>(begin);
  SplitOverTwoThreads(size, [bytes](size_t from, size_t to) {
    PopulatePages(bytes + from, to - from);
    return true;
  });
}

}  // namespace fxremat
