// fxremat/phases.h: phases are timed only under a PhaseLog, summed by name in
// first-seen order, and nest.
#include <catch2/catch.hpp>

#include "fxremat/phases.h"

using namespace fxremat;

TEST_CASE("without a PhaseLog, a ScopedPhase records nothing") {
  REQUIRE(CurrentPhaseLog() == nullptr);
  { ScopedPhase phase("nothing"); }
  REQUIRE(CurrentPhaseLog() == nullptr);
}

TEST_CASE("a PhaseLog sums each phase by name, in first-seen order, and nests") {
  PhaseLog log;
  {
    ScopedPhaseLog scope(&log);
    REQUIRE(CurrentPhaseLog() == &log);
    for (int i = 0; i < 3; ++i) {
      ScopedPhase outer("outer");
      ScopedPhase inner("inner");
    }
    { ScopedPhase later("later"); }
    PhaseLog nested;
    {
      ScopedPhaseLog inner_scope(&nested);
      ScopedPhase elsewhere("elsewhere");
    }
    REQUIRE(CurrentPhaseLog() == &log);  // the previous log is back
    REQUIRE(nested.entries().size() == 1);
  }
  REQUIRE(CurrentPhaseLog() == nullptr);
  REQUIRE(log.entries().size() == 3);
  REQUIRE(log.entries()[0].name == "outer");
  REQUIRE(log.entries()[0].count == 3);
  REQUIRE(log.entries()[1].name == "inner");
  REQUIRE(log.entries()[1].count == 3);
  REQUIRE(log.entries()[2].name == "later");
  REQUIRE(log.entries()[0].ms >= log.entries()[1].ms);  // outer includes inner
  REQUIRE(log.ToText().find("outer") != std::string::npos);
  REQUIRE(log.ToJson().rfind("{\"outer\":", 0) == 0);
}
