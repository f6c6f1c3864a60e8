// fxremat_json_parse_bench: how fast each candidate JSON parser walks a graph
// document, before any IR is built (the choice of docs/benchmarks_io.md).
//
//   fxremat_json_parse_bench G.json [repeats]
//
// Every candidate visits every value and reads every string and number, so that
// the lazy parser (simdjson On-Demand) does the same work as the eager ones:
//   nlohmann DOM   json::parse (the reader before issue 11)
//   nlohmann SAX   json::sax_parse with a handler that only counts
//   simdjson DOM   simdjson::dom::parser::parse, then a walk of the tape
//   simdjson OD    simdjson::ondemand, a recursive walk reading every scalar
// Prints the best of `repeats` runs (default 5) in MB/s of JSON text.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <simdjson.h>

namespace {

struct CountingSax : nlohmann::json_sax<nlohmann::json> {
  uint64_t count = 0, bytes = 0;
  bool null() override { return ++count; }
  bool boolean(bool) override { return ++count; }
  bool number_integer(number_integer_t) override { return ++count; }
  bool number_unsigned(number_unsigned_t) override { return ++count; }
  bool number_float(number_float_t, const string_t&) override { return ++count; }
  bool string(string_t& s) override { bytes += s.size(); return ++count; }
  bool binary(binary_t&) override { return ++count; }
  bool start_object(std::size_t) override { return ++count; }
  bool key(string_t& s) override { bytes += s.size(); return ++count; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return ++count; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
};

// Depth is bounded by the document (the benchmark's inputs nest a few levels).
uint64_t WalkOnDemand(simdjson::ondemand::value v, uint64_t& bytes) {
  uint64_t count = 1;
  switch (v.type()) {
    case simdjson::ondemand::json_type::object:
      for (auto field : v.get_object()) {
        bytes += std::string_view(field.unescaped_key()).size();
        count += WalkOnDemand(field.value(), bytes);
      }
      break;
    case simdjson::ondemand::json_type::array:
      for (auto item : v.get_array()) count += WalkOnDemand(item.value(), bytes);
      break;
    case simdjson::ondemand::json_type::string: bytes += std::string_view(v.get_string()).size(); break;
    case simdjson::ondemand::json_type::number: { auto n = v.get_number(); (void)n; } break;
    case simdjson::ondemand::json_type::boolean: (void)bool(v.get_bool()); break;
    case simdjson::ondemand::json_type::null: (void)bool(v.is_null()); break;
  }
  return count;
}

uint64_t WalkDom(simdjson::dom::element e, uint64_t& bytes) {
  uint64_t count = 1;
  switch (e.type()) {
    case simdjson::dom::element_type::OBJECT:
      for (auto field : simdjson::dom::object(e)) {
        bytes += field.key.size();
        count += WalkDom(field.value, bytes);
      }
      break;
    case simdjson::dom::element_type::ARRAY:
      for (auto item : simdjson::dom::array(e)) count += WalkDom(item, bytes);
      break;
    case simdjson::dom::element_type::STRING: bytes += std::string_view(e).size(); break;
    default: break;
  }
  return count;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: fxremat_json_parse_bench G.json [repeats]\n";
    return 2;
  }
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  std::ifstream in(argv[1], std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const simdjson::padded_string padded(text);
  const double mb = static_cast<double>(text.size()) / 1e6;

  auto best_of = [&](const char* name, const std::function<uint64_t()>& run) {
    double best = 1e30;
    uint64_t result = 0;
    for (int i = 0; i < repeats; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      result = run();
      auto t1 = std::chrono::steady_clock::now();
      best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
    }
    fmt::print("{:<14} {:8.1f} ms {:8.0f} MB/s  ({} values)\n", name, best * 1e3, mb / best, result);
  };
  fmt::print("{}: {:.1f} MB, best of {}\n", argv[1], mb, repeats);
  best_of("nlohmann DOM", [&] { return static_cast<uint64_t>(nlohmann::json::parse(text).size()); });
  best_of("nlohmann SAX", [&] {
    CountingSax sax;
    nlohmann::json::sax_parse(text, &sax);
    return sax.count;
  });
  simdjson::dom::parser dom_parser;
  best_of("simdjson DOM", [&] {
    uint64_t bytes = 0;
    return WalkDom(dom_parser.parse(padded), bytes);
  });
  simdjson::ondemand::parser od_parser;
  best_of("simdjson OD", [&] {
    uint64_t bytes = 0;
    simdjson::ondemand::document doc = od_parser.iterate(padded);
    simdjson::ondemand::value root = doc.get_value();
    return WalkOnDemand(root, bytes);
  });
  return 0;
}
