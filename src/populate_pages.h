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

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace fxremat {

// The page size these helpers assume (Linux x86-64 and aarch64's default).
inline constexpr uintptr_t kPageBytes = 4096;

#if defined(__linux__)
// madvise(advice) over the whole pages of [begin, begin + size); best effort.
inline void AdviseWholePages(void* begin, size_t size, int advice) {
  const uintptr_t first = (reinterpret_cast<uintptr_t>(begin) + kPageBytes - 1) & ~(kPageBytes - 1);
  const uintptr_t last = (reinterpret_cast<uintptr_t>(begin) + size) & ~(kPageBytes - 1);
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

// Note [Warming pages ahead]
// Below kMapOnAnotherThreadFrom a document's parse and build fault their pages
// in as they first write them, on the reading thread: at synth_10k (2.9 MB of
// JSON, 10,000 nodes) about 10 MB of simdjson index, tape and strings and 6 MB
// of node arena, some 4,000 faults and a third of the load. A PageWarmer is
// a second thread that maps queued ranges, in the order queued, while the
// reading thread does something else first: LoadGraphFile queues the
// parser's buffers before it reads the file, and the reader the node arena
// before it builds the nodes. Mapping never changes memory's contents, so the
// two threads may touch a page in either order; a range the reading thread
// reaches first it simply faults in itself.
// What it gains is bounded: on this 2-vCPU machine two threads of one process
// mapping pages at once take as long as one mapping both (10 MB each: 3.4 ms
// alone, 7 ms for one of them side by side), so a warmer pays only while the
// reading thread computes (stage 2, building nodes) instead of faulting. At
// synth_10k parse-json went from 5.9 to 2.6-4.1 ms (medians, interleaved),
// with outliers both ways: the warmer may start late (up to 3 ms), and the
// read is slower while it maps. At 0.9 and 1.4 MB it was even, at 0.3 MB
// slower by its start: it warms documents of 1 MB or more.
class PageWarmer {
 public:
  PageWarmer() = default;
  PageWarmer(const PageWarmer&) = delete;
  PageWarmer& operator=(const PageWarmer&) = delete;
  ~PageWarmer() { Stop(); }

  // Maps [begin, begin + size) after what is queued already. The memory must
  // stay allocated until it is mapped or Drain()/Stop() returns. False when
  // no thread could start (the pages then fault in as before).
  bool Queue(void* begin, size_t size) {
    if (size == 0) return true;
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return false;
    if (!thread_.joinable()) {
      try {
        thread_ = std::thread([this] { Run(); });
      } catch (const std::system_error&) {
        stopped_ = true;
        return false;
      }
    }
    queue_.emplace_back(static_cast<std::byte*>(begin), size);
    wake_.notify_one();
    return true;
  }
  // Drops what is still queued and waits for the range being mapped: after
  // it, no queued memory is touched, and more may be queued.
  void Drain() {
    std::unique_lock<std::mutex> lock(mu_);
    queue_.clear();
    idle_.wait(lock, [this] { return !busy_; });
  }
  // Drain(), and the thread ends.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.clear();
      stopped_ = true;
      wake_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  // Ranges are mapped a step at a time, so that Drain() waits for one step.
  static constexpr size_t kStep = size_t{256} << 10;

  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      wake_.wait(lock, [this] { return stopped_ || !queue_.empty(); });
      if (stopped_) return;
      auto& [begin, size] = queue_.front();
      // Steps end on a page boundary: PopulatePages maps whole pages only.
      const size_t step =
          size <= kStep ? size : kStep - (reinterpret_cast<uintptr_t>(begin + kStep) & (kPageBytes - 1));
      std::byte* const at = begin;
      begin += step;
      size -= step;
      if (size == 0) queue_.pop_front();
      busy_ = true;
      lock.unlock();
      PopulatePages(at, step);
      lock.lock();
      busy_ = false;
      idle_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_, idle_;
  std::deque<std::pair<std::byte*, size_t>> queue_;
  bool busy_ = false, stopped_ = false;
  std::thread thread_;
};

}  // namespace fxremat
