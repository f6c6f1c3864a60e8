// Catch2 v2 test runner for all C++ tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
