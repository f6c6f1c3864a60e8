// A small FileCheck for golden tests: CHECK, CHECK-NEXT, CHECK-SAME, CHECK-NOT,
// with {{regex}} and [[VAR:regex]] / [[VAR]] captures, as LLVM's FileCheck reads
// them. Matching is per line.
#pragma once

#include <string>
#include <vector>

namespace fxremat::testing {

struct CheckDirective {
  enum class Kind { kCheck, kNext, kSame, kNot } kind;
  std::string pattern;
  int line = 0;  // in the test file, for messages
};

// Returns an empty string on success, else a message naming the failed
// directive and showing the output.
std::string RunFileCheck(const std::string& output, const std::vector<CheckDirective>& checks);

}  // namespace fxremat::testing
