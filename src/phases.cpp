// Phase timing (fxremat/phases.h).
#include "fxremat/phases.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace fxremat {

namespace {
thread_local PhaseLog* current_log = nullptr;
}  // namespace

size_t PhaseLog::Begin(std::string_view name) {
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].name == name) return i;
  entries_.push_back(Entry{std::string(name), 0, 0});
  return entries_.size() - 1;
}

void PhaseLog::End(size_t entry, double ms) {
  entries_[entry].ms += ms;
  ++entries_[entry].count;
}

void PhaseLog::Merge(const PhaseLog& other) {
  for (const Entry& e : other.entries()) {
    Entry& mine = entries_[Begin(e.name)];
    mine.ms += e.ms;
    mine.count += e.count;
  }
}

std::string PhaseLog::ToText() const {
  std::string out = fmt::format("{:<28} {:>10} {:>6}\n", "phase", "ms", "count");
  for (const Entry& e : entries_) out += fmt::format("{:<28} {:>10.3f} {:>6}\n", e.name, e.ms, e.count);
  return out;
}

std::string PhaseLog::ToJson() const {
  std::string out = "{";
  for (size_t i = 0; i < entries_.size(); ++i)
    out += fmt::format("{}\"{}\":{:.3f}", i ? "," : "", entries_[i].name, entries_[i].ms);
  return out + "}";
}

PhaseLog* CurrentPhaseLog() { return current_log; }

int64_t PeakRssKb() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  int64_t kb = -1;
  while (std::fgets(line, sizeof(line), f))
    if (std::strncmp(line, "VmHWM:", 6) == 0) {
      kb = std::strtoll(line + 6, nullptr, 10);
      break;
    }
  std::fclose(f);
  return kb;
}

ScopedPhaseLog::ScopedPhaseLog(PhaseLog* log) : previous_(current_log) { current_log = log; }
ScopedPhaseLog::~ScopedPhaseLog() { current_log = previous_; }

}  // namespace fxremat
