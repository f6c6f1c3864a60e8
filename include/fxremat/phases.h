// Opt-in wall-clock timing of the named phases of a run (read, cse, solve,
// extract, write, ...), for profiles and the benchmark docs' phase breakdowns.
// Off unless the thread has a PhaseLog installed (ScopedPhaseLog); a phase
// then adds its duration under its name. Off, a ScopedPhase costs one
// thread-local read.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fxremat {

// Durations by phase name, in the order each name first began; a phase run
// more than once (a pass per budget candidate) is summed, with its count.
class PhaseLog {
 public:
  struct Entry {
    std::string name;
    double ms = 0;
    int64_t count = 0;
  };
  // The index of `name`'s entry, made (at the end, with no time yet) unless it
  // is one: called when a phase starts, so that entries are in the order
  // phases began.
  size_t Begin(std::string_view name);
  // Adds one run of `ms` to the entry Begin returned.
  void End(size_t entry, double ms);
  // Adds another log's entries (times and counts) to this one's, by name: a
  // worker thread's phases, once it is joined.
  void Merge(const PhaseLog& other);
  const std::vector<Entry>& entries() const { return entries_; }
  // "name ms count" lines, a header first: what the CLI prints under FXREMAT_PHASES=1.
  std::string ToText() const;
  // {"name": ms, ...}: what fxremat_bench prints.
  std::string ToJson() const;

 private:
  std::vector<Entry> entries_;
};

// This process's peak resident set in KiB since it started its program
// (Linux's VmHWM), or -1 where unknown. Unlike getrusage's ru_maxrss it does
// not include the peak of the process that spawned it: Linux carries the old
// address space's peak across exec (a bench run from a large Python process
// read 2.4 GB for a 1.8 GB CLI).
int64_t PeakRssKb();

// The log phases of this thread go to, or nullptr (timing is off).
PhaseLog* CurrentPhaseLog();

// Installs `log` for this thread for the scope's lifetime (nestable: the
// previous log comes back after).
class ScopedPhaseLog {
 public:
  explicit ScopedPhaseLog(PhaseLog* log);
  ~ScopedPhaseLog();
  ScopedPhaseLog(const ScopedPhaseLog&) = delete;
  ScopedPhaseLog& operator=(const ScopedPhaseLog&) = delete;

 private:
  PhaseLog* previous_;
};

// Times its scope as phase `name`. Phases nest; each reports its own whole duration, so an outer phase
// includes its inner ones.
class ScopedPhase {
 public:
  explicit ScopedPhase(std::string_view name)
      : log_(CurrentPhaseLog()) {
    if (log_) {
      entry_ = log_->Begin(name);
      start_ = Clock::now();
    }
  }
  ~ScopedPhase() {
    if (log_) log_->End(entry_, std::chrono::duration<double, std::milli>(Clock::now() - start_).count());
  }
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  using Clock = std::chrono::steady_clock;
  PhaseLog* log_;
  size_t entry_ = 0;
  Clock::time_point start_;
};

}  // namespace fxremat
