// fxremat_io_bench: graph file I/O in process, for bench/io_bench.py.
//
//   fxremat_io_bench G.json[.gz] [--repeats N] [--out DIR] [--parse-only]
//
// Times, best of N: reading the file into memory (ReadFileContents, gunzip
// included), parsing it into the IR (GraphFromJson on the text), serializing
// the IR (GraphToJson) and writing it to a file (WriteGraphFile, .json and
// .json.gz). FXREMAT_JSON_IO=nlohmann selects the pre-issue-11 reader and
// writer (nlohmann's DOM) in the same build. Prints one JSON object.
// --parse-only runs GraphFromJson N times and nothing else (for perf record).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include "fxremat/serialize.h"

namespace {

// fn() runs `repeats` times; it may return the time its measured part began.
template <typename Fn>
double BestOf(int repeats, Fn&& fn) {
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    if constexpr (std::is_same_v<decltype(fn()), std::chrono::steady_clock::time_point>) t0 = fn();
    else fn();
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: fxremat_io_bench G.json[.gz] [--repeats N] [--out DIR] [--parse-only]\n";
    return 2;
  }
  const std::string path = argv[1];
  int repeats = 3;
  std::string out_dir = std::filesystem::temp_directory_path().string();
  // --parse-only: only the parse loop (GraphFromJson on the text in memory), for profiling
  bool parse_only = false;
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--repeats" && i + 1 < argc) repeats = std::atoi(argv[++i]);
    else if (flag == "--out" && i + 1 < argc) out_dir = argv[++i];
    else if (flag == "--parse-only") parse_only = true;
    else {
      std::cerr << "fxremat_io_bench: unknown argument " << flag << "\n";
      return 2;
    }
  }
  auto contents = fxremat::ReadFileContents(path);
  if (!contents.ok()) {
    std::cerr << contents.status().ToString() << "\n";
    return 2;
  }
  if (parse_only) {
    for (int i = 0; i < repeats; ++i) {
      auto g = fxremat::GraphFromJson(*contents);
      if (!g.ok()) { std::cerr << g.status().ToString() << "\n"; return 2; }
    }
    return 0;
  }
  const double file_s = BestOf(repeats, [&] { (void)fxremat::ReadFileContents(path); });
  // The graphs are destroyed outside the timed region.
  std::unique_ptr<fxremat::Graph> keep;
  const double load_file_s = BestOf(repeats, [&] {
    keep.reset();
    auto t0 = std::chrono::steady_clock::now();
    auto g = fxremat::LoadGraphFile(path);
    if (!g.ok()) { std::cerr << g.status().ToString() << "\n"; std::exit(2); }
    keep = std::move(*g);
    return t0;
  });
  const double parse_s = BestOf(repeats, [&] {
    keep.reset();
    auto t0 = std::chrono::steady_clock::now();
    auto g = fxremat::GraphFromJson(*contents);
    if (!g.ok()) { std::cerr << g.status().ToString() << "\n"; std::exit(2); }
    keep = std::move(*g);
    return t0;
  });
  keep.reset();
  auto graph = fxremat::GraphFromJson(*contents);
  std::string text;
  const double serialize_s = BestOf(repeats, [&] { text = fxremat::GraphToJson(**graph); });
  const std::string json_out = (std::filesystem::path(out_dir) / "io_bench_out.json").string();
  const std::string gz_out = json_out + ".gz";
  const double write_json_s = BestOf(repeats, [&] {
    if (!fxremat::WriteGraphFile(json_out, **graph).ok()) std::exit(2);
  });
  const double write_gz_s = BestOf(repeats, [&] {
    if (!fxremat::WriteGraphFile(gz_out, **graph).ok()) std::exit(2);
  });
  fmt::print(
      "{{\"path\": \"{}\", \"nodes\": {}, \"json_bytes\": {}, \"written_json_bytes\": {}, \"gz_bytes\": {}, "
      "\"read_file_s\": {:.4f}, \"parse_s\": {:.4f}, \"load_file_s\": {:.4f}, \"serialize_s\": {:.4f}, "
      "\"write_json_s\": {:.4f}, \"write_gz_s\": {:.4f}}}\n",
      path, (*graph)->size(), contents->size(), text.size(), std::filesystem::file_size(gz_out), file_s, parse_s,
      load_file_s, serialize_s, write_json_s, write_gz_s);
  std::filesystem::remove(json_out);
  std::filesystem::remove(gz_out);
  return 0;
}
