// Mapping freshly allocated memory before its first write.
//
// Note [Populated pages]
// A large graph's memory is touched once, page by page, and every first touch
// is a page fault: at a million nodes about a quarter of the CLI's time went
// to faults. MADV_POPULATE_WRITE (Linux 5.14) maps a range in one system
// call, without a fault's entry and exit per page, and two threads can map
// two halves of a range at once. Used for the node arena's chunks (Note [Node
// arena]) and the buffer a gzip file inflates into. Best effort: elsewhere, or
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

// Maps the whole pages of [begin, begin + size).
inline void PopulatePages(void* begin, size_t size) {
#if defined(__linux__)
  constexpr int kMadvPopulateWrite = 23;  // MADV_POPULATE_WRITE, absent from older headers
  constexpr uintptr_t kPage = 4096;
  const uintptr_t first = (reinterpret_cast<uintptr_t>(begin) + kPage - 1) & ~(kPage - 1);
  const uintptr_t last = (reinterpret_cast<uintptr_t>(begin) + size) & ~(kPage - 1);
  if (last > first) (void)madvise(reinterpret_cast<void*>(first), last - first, kMadvPopulateWrite);
#else
  (void)begin;
  (void)size;
#endif
}

// Below this many bytes, memory is not worth another thread's mapping:
// starting a thread costs more than mapping it, and small graphs are read often.
inline constexpr size_t kMapOnAnotherThreadFrom = size_t{16} << 20;

// The same, the second half on another thread (this one's alone if none
// starts, or for a range under kMapOnAnotherThreadFrom).
inline void PopulatePagesOnTwoThreads(void* begin, size_t size) {
  if (size < kMapOnAnotherThreadFrom) {
    PopulatePages(begin, size);
    return;
  }
  std::byte* const bytes = static_cast<std::byte*>(begin);
  const size_t half = size / 2;
  std::thread other;
  try {
    other = std::thread([=] { PopulatePages(bytes + half, size - half); });
  } catch (const std::system_error&) {
    PopulatePages(bytes, size);
    return;
  }
  PopulatePages(bytes, half);
  other.join();
}

}  // namespace fxremat
