// The `fxremat` command line. The library reports errors as Status; this is the
// edge where they become one line on stderr and an exit code:
//   0  success
//   1  numeric verification or signature check failed
//   2  bad input or bad usage (malformed file, unknown op, contradictory flags)
#include <atomic>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <filesystem>
#include <iostream>
#include <set>
#include <exception>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fxremat/phases.h"
#include "fxremat/inspect.h"
#include "fxremat/op_categories.h"
#include "fxremat/partition.h"
#include "fxremat/pipeline.h"
#include "fxremat/policy.h"
#include "fxremat/residuals.h"
#include "fxremat/serialize.h"
#include "fxremat/text.h"
#include "fxremat/torch_bridge.h"
#include "passes/min_cut_partition.h"

namespace fs = std::filesystem;
using namespace fxremat;

namespace {

constexpr int kExitOk = 0;
constexpr int kExitVerifyFailed = 1;
constexpr int kExitBadInput = 2;

int Fail(const Status& status) {
  std::cerr << "fxremat: error: " << status.ToString() << "\n";
  return status.code() == ErrorCode::kVerifyFailed ? kExitVerifyFailed : kExitBadInput;
}

// The libtorch bridge, loaded on first use from libfxremat_torch_plugin.so
// beside this executable (src/torch_bridge/plugin.cpp says why).
class TorchPlugin {
 public:
  using CompleteFn = void (*)(Graph*, Status*);
  using VerifyFn = void (*)(const Graph*, const Graph*, const Graph*, const Signature*, const VerifyOptions*,
                            Status*, VerifyReport*);
  static Expected<TorchPlugin*> Get() {
    static TorchPlugin plugin;
    if (!plugin.error_.empty())
      return Status::BadInput(plugin.error_ + " (rebuild with `make build`)", "libtorch bridge");
    return &plugin;
  }
  CompleteFn complete = nullptr;
  VerifyFn verify = nullptr;

 private:
  TorchPlugin() {
    char exe[4096];
    ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    std::string dir = n > 0 ? fs::path(std::string(exe, static_cast<size_t>(n))).parent_path().string() : ".";
    std::string path = dir + "/libfxremat_torch_plugin.so";
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* why = ::dlerror();
      error_ = fmt::format("cannot load {}: {}", path, why ? why : "unknown error");
      return;
    }
    complete = reinterpret_cast<CompleteFn>(::dlsym(handle, "fxremat_plugin_complete_op_facts"));
    verify = reinterpret_cast<VerifyFn>(::dlsym(handle, "fxremat_plugin_verify"));
    if (!complete || !verify) error_ = fmt::format("{} lacks its entry points", path);
  }
  std::string error_;
};

// Whether some call_function target has no op facts (Python callables and the
// naming ops need none from PyTorch).
bool NeedsOpFacts(const Graph& graph) {
  for (const auto& up : graph.nodes()) {
    const Node& n = *up;
    if (!n.isCallFunction() || n.opInfo() != nullptr || IsAnnotationOp(n.target())) continue;
    if (IsPythonCallableTarget(n.target())) continue;
    return true;
  }
  return false;
}

// Note [Graphs outlive the command]: freeing a graph node by node costs
// ~0.2 s per million nodes (the destroy-graph phase), work the operating
// system does for nothing when the process exits. A command that is done with
// a large graph buries it instead: the graph stays allocated, reachable from
// this static array (so a leak checker reports nothing), until the process
// ends. The same thing LLVM's BuryPointer does for clang's ASTs.
void BuryGraph(std::unique_ptr<Graph> graph) {
  static std::atomic<size_t> buried{0};
  static Graph* graveyard[8];
  const size_t slot = buried.fetch_add(1);
  if (slot < std::size(graveyard)) graveyard[slot] = graph.release();  // else freed here, as usual
}

// Loads a graph and completes its op facts from the dispatcher if it lacks any.
Expected<std::unique_ptr<Graph>> LoadForWork(const std::string& path) {
  FXREMAT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, LoadGraphFile(path));
  if (!NeedsOpFacts(*graph)) return graph;
  FXREMAT_ASSIGN_OR_RETURN(TorchPlugin * plugin, TorchPlugin::Get());
  Status completed;
  plugin->complete(graph.get(), &completed);
  if (!completed.ok()) return completed.WithContext(path);
  return graph;
}

// One file of a command's output: `write` writes it (and any sidecar beside
// it) at the path it is given. `sidecar`: the name of the sidecar it may write
// (SidecarNameFor), or empty.
struct OutputFile {
  std::string name;
  std::function<Status(const std::string& path)> write;
  std::string sidecar;
};

// Whether something other than a regular file stands at `path` (a directory, a
// device, a link: not followed), which an output must not replace.
bool NotARegularFile(const fs::path& path) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(path, ec);
  return fs::exists(st) && !fs::is_regular_file(st);
}

// Writes files into `dir` so that either all of them appear or none does:
// everything is written into a staging directory first (streamed: a graph of a
// million nodes is never held as text), then moved into place.
Status WriteAllOrNothing(const std::string& dir, const std::vector<OutputFile>& files) {
  std::error_code ec;
  fs::path target(dir);
  if (fs::exists(target, ec) && !fs::is_directory(target, ec))
    return Status::BadInput("exists and is not a directory", dir);
  // Every destination must be absent or a regular file before anything is
  // replaced: a directory (or device) in the way fails the run up front, with
  // the earlier files untouched.
  auto check_destination = [&](const std::string& name) -> Status {
    if (NotARegularFile(target / name))
      return Status::BadInput(fmt::format("{} exists and is not a regular file; nothing was written", name), dir);
    return Status::Ok();
  };
  for (const OutputFile& f : files) FXREMAT_RETURN_IF_ERROR(check_destination(f.name));
  // The files are staged where they will be renamed from: in the output
  // directory when it exists (its parent may be read-only: `-o /tmp` as an
  // ordinary user was refused), else beside it, where it will be created.
  const bool target_exists = fs::is_directory(target, ec);
  fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  if (!target_exists) fs::create_directories(parent, ec);
  fs::path staging = target_exists
                         ? target / fmt::format(".fxremat-staging.{}", ::getpid())
                         : parent / fmt::format(".{}.fxremat-staging.{}", target.filename().string(), ::getpid());
  fs::remove_all(staging, ec);
  if (!fs::create_directory(staging, ec))
    return Status::BadInput(target_exists ? "cannot write into the output directory" : "cannot create the output directory",
                            dir);
  // The files are written at once, each on its own thread but the first
  // (Note [Texts beside the graphs]): a writer only reads what it writes, and
  // at a million nodes each graph takes about half a second. A thread that
  // cannot start leaves its file to this one. The first failure in file order
  // is the one reported.
  // Their phases join this thread's log once they are done.
  std::vector<Status> written_status(files.size());
  PhaseLog* const log = CurrentPhaseLog();
  std::vector<PhaseLog> writer_logs(files.size());
  {
    ScopedPhase phase("write-files");
    std::vector<std::jthread> writers;
    std::vector<size_t> inline_files = {0};
    for (size_t i = 1; i < files.size(); ++i) {
      try {
        writers.emplace_back([&, i] {
          ScopedPhaseLog install(log ? &writer_logs[i] : nullptr);
          written_status[i] = files[i].write((staging / files[i].name).string());
        });
      } catch (const std::system_error&) {
        inline_files.push_back(i);
      }
    }
    for (size_t i : inline_files)
      if (i < files.size()) written_status[i] = files[i].write((staging / files[i].name).string());
  }  // joins the writers
  if (log)
    for (const PhaseLog& l : writer_logs) log->Merge(l);
  for (Status& st : written_status) {
    if (!st.ok()) {
      fs::remove_all(staging, ec);
      return st;
    }
  }
  if (!fs::exists(target, ec)) {
    fs::rename(staging, target, ec);
    if (ec) {
      fs::remove_all(staging, ec);
      return Status::BadInput("cannot create the output directory", dir);
    }
    return Status::Ok();
  }
  // What was written, sidecars included, in name order.
  std::vector<std::string> written;
  for (const fs::directory_entry& e : fs::directory_iterator(staging, ec)) written.push_back(e.path().filename().string());
  if (ec) {
    fs::remove_all(staging, ec);
    return Status::BadInput("cannot list what was written; nothing was written", dir);
  }
  std::sort(written.begin(), written.end());
  for (const std::string& name : written) {
    if (Status st = check_destination(name); !st.ok()) {
      fs::remove_all(staging, ec);
      return st;
    }
  }
  for (const std::string& name : written) {
    fs::rename(staging / name, target / name, ec);
    if (ec) {
      fs::remove_all(staging, ec);
      return Status::BadInput(fmt::format("cannot write {}", name), dir);
    }
  }
  fs::remove_all(staging, ec);
  // A sidecar an earlier run left beside a file this run wrote without one
  // belongs to no file any more (nothing refers to it), and would pass for
  // this run's: it goes, now that the new files are in place. Only that exact
  // name, and only a regular file.
  for (const OutputFile& f : files) {
    if (f.sidecar.empty() || std::binary_search(written.begin(), written.end(), f.sidecar)) continue;
    const fs::path stale = target / f.sidecar;
    if (!fs::is_regular_file(fs::symlink_status(stale, ec))) continue;
    if (fs::remove(stale, ec); ec)
      return Status::BadInput(fmt::format("wrote the files, but cannot remove {}, left by an earlier run", f.sidecar),
                              dir);
  }
  return Status::Ok();
}

int RunInspect(const std::string& path) {
  auto graph = LoadForWork(path);
  if (!graph.ok()) return Fail(graph.status());
  auto report = InspectGraph(**graph);
  if (!report.ok()) return Fail(report.status().WithContext(path));
  std::cout << *report;
  return kExitOk;
}

int RunPrint(const std::string& path, const std::string& output) {
  auto graph = LoadGraphFile(path);
  if (!graph.ok()) return Fail(graph.status());
  if (output.empty()) {
    std::cout << PrintGraph(**graph);
    return kExitOk;
  }
  // ".fxir.gz" is the text form gzipped (WriteFileAtomically compresses a
  // ".gz"), as LoadGraphFile reads it back: it decompresses any file and takes
  // one that starts with '#' as text. It used to get gzipped JSON.
  const bool as_text = output.ends_with(".fxir") || output.ends_with(".fxir.gz");
  if (NotARegularFile(output))
    return Fail(Status::BadInput("exists and is not a regular file (a directory, device or link); nothing was written",
                                 output));
  Status st = as_text ? WriteFileAtomically(output, PrintGraph(**graph)) : WriteGraphFile(output, **graph);
  return st.ok() ? kExitOk : Fail(st);
}

std::string Describe(const SavedValue& s) {
  std::string facts = FormatValueFacts(s.facts);
  std::string names;
  for (const std::string& name : s.names) names += (names.empty() ? "" : ", ") + fmt::format("'{}'", name);
  return fmt::format("  {:<24} {:<36} {:>10} B  fw out {:>3} -> bw in {:>3}{}{}{}", s.name, facts, s.bytes,
                     s.forward_output_index, s.backward_input_index, names.empty() ? "" : "  named " + names,
                     s.offloaded ? "  offloaded" : "", s.rule.empty() ? "" : "  (" + s.rule + ")");
}

// The flags `partition` and `residuals` share: what to partition with.
struct PartitionFlags {
  std::string partitioner = "mincut";
  std::vector<std::string> config;
  std::string policy, policy_file;
  std::string offload_target = "torch";
  bool barrier = false;
  bool keep_annotations = false;
  std::string memory_budget;
  // The --memory-budget option of each subcommand these flags serve, to tell
  // an empty value ('--memory-budget ""', malformed) from no flag.
  std::vector<const CLI::Option*> memory_budget_options;

  // listed_memory_budget: false for pareto, whose front spans every budget:
  // the flag is left out of its help but still taken, to be refused by name.
  void AddTo(CLI::App* cmd, bool listed_memory_budget = true) {
    CLI::Option* budget_option = cmd->add_option("--memory-budget", memory_budget,
                    "Bound on the step's simulated peak above the inputs (Note [Peak budget], docs/budget.md): "
                    "a whole number of bytes, with an optional unit (B, KB, MB, GB, KiB, MiB, GiB), e.g. 64MiB; "
                    "a decimal such as 1.5GiB when it makes whole bytes; a fraction of the range goes through "
                    "--config activation_memory_budget=F");
    if (!listed_memory_budget) budget_option->group("");  // CLI11: an option in no group is not listed
    memory_budget_options.push_back(budget_option);
    cmd->add_option("--partitioner", partitioner,
                    "mincut (functorch's min_cut_rematerialization_partition) or default (functorch's "
                    "default_partition)")->capture_default_str();
    cmd->add_option("--config", config,
                    "A min-cut option as NAME=VALUE, with functorch's config names: recompute_views, "
                    "aggressive_recomputation, ban_recompute_{used_far_apart,long_fusible_chains,"
                    "materialized_backward,not_in_allowlist,reductions}, treat_parameters_as_free_to_save, cse, "
                    "max_dist_from_bw, activation_memory_budget (0..1 of the range from the smallest peak to the "
                    "min cut's), memory_budget_bytes, budget_objective (peak or saved), recompute_flops_per_byte, budget_milp_max_variables, budget_milp_max_nodes, "
                    "offload_bandwidth_gbps, device_memory_bandwidth_gbps and device_tflops (docs/budget.md), "
                    "peak_model (eager, or inductor: pointwise results Inductor inlines are not allocated), "
                    "static_lifetime_input_indices "
                    "(comma-separated primal indices; default: primals with a params[/buffers[ path), "
                    "max_flow (dinic, boykov_kolmogorov, push_relabel). Repeatable.");
    cmd->add_option("--policy", policy,
                    "Checkpoint policy NAME[:ARGS] (docs/policies.md), e.g. save_only_these_names:a,b or "
                    "save_and_offload_only_these_names:save=a;offload=b; POLICY+POLICY combines");
    cmd->add_option("--policy-file", policy_file, "Checkpoint policy as a JSON file (docs/policies.md)");
    cmd->add_option("--offload-target", offload_target, "Where offloaded values go: torch (prims.device_put to "
                    "cpu), torch_async (fxremat::offload/reload on a side stream, overlapped) or xla "
                    "(xla::place_to_host)")->capture_default_str();
    cmd->add_flag("--barrier", barrier, "Pass the inputs of recomputed regions through xla::optimization_barrier "
                  "(needs --offload-target xla)");
    cmd->add_flag("--keep-annotations", keep_annotations, "Keep the naming ops in the emitted graphs");
  }

  // The request these flags make; every flag error is bad input, found before
  // any graph is read.
  Expected<PartitionRequest> Request() const {
    PartitionRequest request;
    request.partitioner = partitioner;
    for (const std::string& item : config) {
      auto eq = item.find('=');
      if (eq == std::string::npos) return Status::BadInput(fmt::format("--config takes NAME=VALUE, not '{}'", item));
      FXREMAT_RETURN_IF_ERROR(SetMinCutOption(request.mincut, item.substr(0, eq), item.substr(eq + 1)));
    }
    if (!config.empty() && partitioner != "mincut")
      return Status::BadInput("--config applies to --partitioner mincut only");
    const bool budget_given = std::any_of(memory_budget_options.begin(), memory_budget_options.end(),
                                          [](const CLI::Option* o) { return o->count() > 0; });
    if (budget_given || !memory_budget.empty()) {
      if (partitioner != "mincut") return Status::BadInput("--memory-budget applies to --partitioner mincut only");
      FXREMAT_ASSIGN_OR_RETURN(int64_t bytes, ParseByteSize(memory_budget, "--memory-budget"));
      if (request.mincut.memory_budget_bytes)  // one flag would silently win over the other
        return Status::BadInput(fmt::format("two byte budgets given: --memory-budget {} and --config "
                                            "memory_budget_bytes={}; give one",
                                            memory_budget, *request.mincut.memory_budget_bytes));
      request.mincut.memory_budget_bytes = bytes;
    }
    if (!policy.empty() && !policy_file.empty())
      return Status::BadInput("--policy and --policy-file both give a policy: use one");
    if (!policy.empty()) {
      FXREMAT_ASSIGN_OR_RETURN(request.mincut.policy, ParsePolicy(policy));
    } else if (!policy_file.empty()) {
      FXREMAT_ASSIGN_OR_RETURN(std::string text, ReadFileContents(policy_file));
      FXREMAT_ASSIGN_OR_RETURN(request.mincut.policy, PolicyFromJson(text, policy_file));
    }
    FXREMAT_ASSIGN_OR_RETURN(request.offload_target, OffloadTargetFromName(offload_target));
    request.barrier = barrier;
    request.keep_annotations = keep_annotations;
    if (barrier && request.offload_target != OffloadTarget::kXla)
      return Status::BadInput("--barrier inserts xla::optimization_barrier and needs --offload-target xla");
    return request;
  }
};

// Loads the joint graph at `path` and partitions it as the flags say. With
// `request_out`, the step's peak is left to the caller (AttachStepPeak with
// the request stored there); otherwise it is in the signature.
Expected<Partition> PartitionFile(const std::string& path, const PartitionFlags& flags,
                                  PartitionRequest* request_out = nullptr) {
  FXREMAT_ASSIGN_OR_RETURN(PartitionRequest request, flags.Request());
  request.simulate_peak = request_out == nullptr;
  if (request_out) *request_out = request;
  FXREMAT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, LoadForWork(path));
  if (graph->kind() != GraphKind::kJoint)
    return Status::BadInput(fmt::format("expected a joint graph, got a {} graph", GraphKindName(graph->kind())), path);
  Expected<Partition> partition = RunPartition(*graph, request);
  if (!partition.ok()) return partition.status().WithContext(path);
  BuryGraph(std::move(graph));  // Note [Graphs outlive the command]
  return partition;
}

// What `partition` prints after the files are written: the saved values and
// the step's peak.
std::string PartitionSummary(const Partition& p, const std::string& partitioner, const std::string& out_dir) {
  std::string out = fmt::format("partitioner {}: forward {} nodes, backward {} nodes; saved {} values, {} bytes",
                                partitioner, p.forward->size(), p.backward->size(), p.signature.saved.size(),
                                p.signature.savedBytes());
  if (p.signature.savedSymInts() > 0) out += fmt::format(" and {} symints", p.signature.savedSymInts());
  if (p.signature.offloadedBytes() > 0) out += fmt::format(" ({} bytes offloaded to host)", p.signature.offloadedBytes());
  out += "\n";
  // A list of a hundred thousand lines is not read, and a terminal takes
  // seconds to print it: when the signature is written, the first
  // kListedSavedValues are listed and the rest counted (signature.json has
  // every one, `fxremat residuals` prints them all).
  constexpr size_t kListedSavedValues = 100;
  const size_t listed = out_dir.empty() ? p.signature.saved.size()
                                        : std::min(p.signature.saved.size(), kListedSavedValues);
  for (size_t i = 0; i < listed; ++i) {
    out += Describe(p.signature.saved[i]);
    out += "\n";
  }
  if (listed < p.signature.saved.size())
    out += fmt::format("  ... and {} more saved values (every one is in {}/signature.json; fxremat residuals lists them)\n",
                       p.signature.saved.size() - listed, out_dir);
  if (const auto& pk = p.signature.peak) {
    out += fmt::format("step peak (simulated): {} bytes above the inputs, {}", pk->bytes,
                       pk->node.empty() ? fmt::format("when the tangents arrive")
                                        : fmt::format("at {} in the {}", pk->node, pk->graph));
    if (pk->budget_bytes) out += fmt::format(" (budget {} bytes)", *pk->budget_bytes);
    out += "\n";
  }
  if (!out_dir.empty())  // "-o out/" printed "out//{...}"
    out += fmt::format("wrote {}/{{forward,backward,signature}}.json\n",
                       out_dir.size() > 1 && out_dir.ends_with('/') ? out_dir.substr(0, out_dir.find_last_not_of('/') + 1)
                                                                    : out_dir);
  return out;
}

int RunPartitionCommand(const std::string& path, const PartitionFlags& flags, const std::string& out_dir,
                        const std::string& print) {
  PartitionRequest request;
  auto partition = PartitionFile(path, flags, &request);
  if (!partition.ok()) return Fail(partition.status());
  const Partition& p = *partition;
  struct BuryAtReturn {  // Note [Graphs outlive the command]
    Partition& p;
    ~BuryAtReturn() {
      BuryGraph(std::move(p.forward));
      BuryGraph(std::move(p.backward));
    }
  } bury_at_return{*partition};
  for (const std::string& note : p.signature.notes) std::cerr << "fxremat: warning: " << note << "\n";
  // Note [Texts beside the graphs]: the step's peak (simulated on the emitted
  // graphs and checked against the budget), signature.json's text and the
  // summary only read the graphs, as the graph writers do; a second thread
  // computes them while forward.json and backward.json are written (each on
  // its own thread: WriteAllOrNothing), or this thread does when none can
  // start. At a million nodes the three take about as long as the two graphs'
  // writing, a second and a half in all, which two cores halve. A peak over
  // the budget or a failure to build the signature fails signature.json, and
  // WriteAllOrNothing removes what was staged: nothing is written; one to
  // build the summary is rethrown after the files are written, where it used
  // to happen. The thread's phases join this thread's log (FXREMAT_PHASES=1
  // shows them beside write-graph).
  std::string signature_text, summary;
  Status peak_status;
  std::exception_ptr signature_failed, summary_failed;
  PhaseLog* const log = CurrentPhaseLog();
  PhaseLog texts_log;
  auto build_texts = [&] {
    ScopedPhaseLog install(log ? &texts_log : nullptr);
    peak_status = AttachStepPeak(*partition, request);
    if (!peak_status.ok()) {
      peak_status = peak_status.WithContext(path);
      return;
    }
    if (!out_dir.empty()) {
      try {
        ScopedPhase phase("write-signature");
        signature_text = SignatureToJson(p.signature);
      } catch (...) {
        signature_failed = std::current_exception();
      }
    }
    try {
      ScopedPhase phase("print-summary");
      summary = PartitionSummary(p, flags.partitioner, out_dir);
    } catch (...) {
      summary_failed = std::current_exception();
    }
  };
  std::jthread texts;
  bool texts_built = false;
  try {
    texts = std::jthread(build_texts);
  } catch (const std::system_error&) {
    build_texts();
  }
  auto texts_ready = [&] {
    if (texts_built) return;
    texts_built = true;
    if (texts.joinable()) texts.join();
    if (log) log->Merge(texts_log);
  };
  if (!out_dir.empty()) {
    // Constants over 64 KiB go to a safetensors file beside each graph
    // (docs/format.md); WriteGraphFile writes it.
    const std::vector<OutputFile> files = {
        {"forward.json", [&](const std::string& file) { return WriteGraphFile(file, *p.forward); },
         SidecarNameFor("forward.json")},
        {"backward.json", [&](const std::string& file) { return WriteGraphFile(file, *p.backward); },
         SidecarNameFor("backward.json")},
        {"signature.json",
         [&](const std::string& file) -> Status {
           texts_ready();
           if (!peak_status.ok()) return peak_status;
           if (signature_failed) {
             try {
               std::rethrow_exception(signature_failed);
             } catch (const std::exception& e) {
               return Status::Internal(fmt::format("building signature.json: {}", e.what()));
             } catch (...) {
               return Status::Internal("building signature.json failed");
             }
           }
           return WriteFileAtomically(file, signature_text);
         }},
    };
    Status st = WriteAllOrNothing(out_dir, files);
    if (!st.ok()) return Fail(st);
  }
  texts_ready();
  if (!peak_status.ok()) return Fail(peak_status);
  if (summary_failed) std::rethrow_exception(summary_failed);
  if (print == "code") {
    std::cout << "# ---- forward ----\n" << PrintGraph(*p.forward) << "\n# ---- backward ----\n"
              << PrintGraph(*p.backward) << "\n";
  }
  std::cout << summary;
  return kExitOk;
}

int RunResiduals(const std::string& path, const PartitionFlags& flags) {
  auto partition = PartitionFile(path, flags);
  if (!partition.ok()) return Fail(partition.status());
  std::cout << ResidualReport(partition->signature);
  return kExitOk;
}

// Whether two paths name one file (the second may not exist yet).
bool SamePath(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::equivalent(a, b, ec)) return true;
  return fs::weakly_canonical(fs::absolute(a), ec) == fs::weakly_canonical(fs::absolute(b), ec);
}

// Destinations of their own for several outputs (pareto's -o and --plot): each
// absent or a regular file, and no two the same.
Status CheckSeparateDestinations(const std::vector<std::string>& paths) {
  std::error_code ec;
  std::set<fs::path> destinations;
  for (const std::string& file : paths) {
    if (NotARegularFile(file)) return Status::BadInput("exists and is not a regular file; nothing was written", file);
    if (!destinations.insert(fs::weakly_canonical(fs::absolute(file), ec)).second)
      return Status::BadInput("named for two outputs; nothing was written", file);
  }
  return Status::Ok();
}
// Files at such destinations, written all or none: each is written beside its
// destination first, and only once all are written are they renamed into
// place (a failure removes what was staged; the destinations are as they were).
Status WriteFilesTogether(const std::vector<std::pair<std::string, std::string>>& files) {
  std::error_code ec;
  std::vector<std::string> paths;
  for (const auto& [file, text] : files) paths.push_back(file);
  FXREMAT_RETURN_IF_ERROR(CheckSeparateDestinations(paths));
  std::vector<std::string> staged;
  auto remove_staged = [&] {
    for (const std::string& tmp : staged) fs::remove(tmp, ec);
  };
  for (const auto& [file, text] : files) {
    // The staged name ends as the destination does: WriteFileAtomically
    // gzips a ".gz" (pareto -o front.json.gz wrote plain JSON).
    const fs::path dest(file);
    const std::string tmp =
        (dest.parent_path() / fmt::format(".fxremat-staging.{}.{}", static_cast<long>(::getpid()),
                                          dest.filename().string()))
            .string();
    if (Status st = WriteFileAtomically(tmp, text); !st.ok()) {
      remove_staged();
      return Status::BadInput("cannot write file; nothing was written", file);
    }
    staged.push_back(tmp);
  }
  for (size_t i = 0; i < files.size(); ++i) {
    fs::rename(staged[i], files[i].first, ec);
    if (ec) {
      remove_staged();
      return Status::BadInput("cannot write file", files[i].first);
    }
  }
  return Status::Ok();
}

// Calls `emit` with each character of `text` (its one to four bytes of
// UTF-8), and with U+FFFD for a byte that starts no well-formed character: a
// name taken from a file name may be any bytes, and JSON and XML readers
// refuse ill-formed UTF-8.
void ForEachUtf8Char(std::string_view text, const std::function<void(std::string_view)>& emit) {
  auto byte = [&](size_t i) { return i < text.size() ? static_cast<unsigned char>(text[i]) : 0u; };
  for (size_t i = 0; i < text.size();) {
    const unsigned lead = byte(i);
    // Unicode's table of well-formed sequences: the length, and the range of
    // the second byte (the others are 80..BF).
    size_t length = 0;
    unsigned low = 0x80, high = 0xBF;
    if (lead < 0x80) {
      length = 1;
    } else if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) low = 0xA0;   // else overlong
      if (lead == 0xED) high = 0x9F;  // else a surrogate
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) low = 0x90;   // else overlong
      if (lead == 0xF4) high = 0x8F;  // else above U+10FFFF
    }
    for (size_t k = 1; k < length; ++k) {
      const unsigned b = byte(i + k);
      if (b < (k == 1 ? low : 0x80) || b > (k == 1 ? high : 0xBF)) length = 0;
    }
    if (length == 0) {
      emit("\xEF\xBF\xBD");
      ++i;
    } else {
      emit(text.substr(i, length));
      i += length;
    }
  }
}

// `text` as a JSON string, quotes included: the graph's name and the labels
// are the user's text, and a '"', '\' or control character pasted in raw made
// the file unreadable. nlohmann escapes them; ill-formed UTF-8 (a name taken
// from a file name may be any bytes) becomes U+FFFD.
std::string JsonQuote(std::string_view text) {
  return nlohmann::json(std::string(text)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A double as JSON writes it: the shortest text that reads back as the same
// value ({:.6g} wrote 16777216 as 1.67772e+07, and the file disagreed with
// fxremat.pareto()). JSON has no infinity or NaN: null.
std::string JsonNumber(double value) { return std::isfinite(value) ? fmt::format("{}", value) : "null"; }

// The front as JSON (one object per point, the solver's candidates first).
std::string FrontToJson(const std::vector<FrontPoint>& front, const std::string& graph) {
  std::string out =
      fmt::format("{{\n  \"format\": \"fxremat.front\",\n  \"graph\": {},\n  \"points\": [", JsonQuote(graph));
  for (size_t i = 0; i < front.size(); ++i)
    out += fmt::format("{}\n    {{\"label\": {}, \"peak_bytes\": {}, \"recompute_cost\": {}, \"saved_bytes\": {}}}",
                       i ? "," : "", JsonQuote(front[i].label), front[i].peak_bytes,
                       JsonNumber(front[i].recompute_cost), front[i].saved_bytes);
  out += "\n  ]\n}\n";
  return out;
}

// `text` as XML character data or an attribute value: the graph's name and the
// labels are the user's text, and a '<' or '&' pasted in raw made the SVG
// unreadable. Characters XML has no place for even escaped (controls other
// than tab, newline and return; U+FFFE, U+FFFF) become U+FFFD.
std::string XmlEscape(std::string_view text) {
  std::string out;
  ForEachUtf8Char(text, [&](std::string_view ch) {
    if (ch == "&") out += "&amp;";
    else if (ch == "<") out += "&lt;";
    else if (ch == ">") out += "&gt;";
    else if (ch == "\"") out += "&quot;";
    else if (ch == "'") out += "&apos;";
    else if ((ch.size() == 1 && static_cast<unsigned char>(ch[0]) < 0x20 && ch != "\t" && ch != "\n" && ch != "\r") ||
             ch == "\xEF\xBF\xBE" || ch == "\xEF\xBF\xBF")
      out += "\xEF\xBF\xBD";
    else out += ch;
  });
  return out;
}

// A scatter plot of the front (peak against recompute cost) as SVG: the
// candidates in grey, the budget points joined in blue, the min cut red.
std::string FrontToSvg(const std::vector<FrontPoint>& front, const std::string& graph) {
  const double w = 640, h = 420, left = 80, right = 20, top = 40, bottom = 60;
  double max_peak = 1, max_cost = 1;
  for (const FrontPoint& p : front) {
    max_peak = std::max(max_peak, static_cast<double>(p.peak_bytes));
    max_cost = std::max(max_cost, p.recompute_cost);
  }
  auto x = [&](double cost) { return left + (w - left - right) * cost / max_cost; };
  auto y = [&](double peak) { return h - bottom - (h - top - bottom) * peak / max_peak; };
  std::string svg = fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n", w, h);
  svg += fmt::format("<rect width=\"{}\" height=\"{}\" fill=\"white\"/>\n", w, h);
  svg += fmt::format("<text x=\"{}\" y=\"20\" text-anchor=\"middle\">{}: step peak vs recompute cost</text>\n", w / 2,
                     XmlEscape(graph));
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"black\"/>\n", left, h - bottom, w - right);
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"black\"/>\n", left, h - bottom, top);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">recompute cost (flops-equivalent, max {:.3g})</text>\n", (left + w - right) / 2, h - 20, max_cost);
  svg += fmt::format("<text x=\"20\" y=\"{}\" transform=\"rotate(-90 20 {})\" text-anchor=\"middle\">peak above inputs (max {:.4g} MiB)</text>\n", (top + h - bottom) / 2, (top + h - bottom) / 2, max_peak / 1048576.0);
  std::string line;
  for (const FrontPoint& p : front) {
    const bool budget = p.label.rfind("budget", 0) == 0;
    const char* color = p.label == "min cut" ? "red" : p.label == "inputs only" ? "orange" : budget ? "steelblue" : "grey";
    svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{}\" fill=\"{}\"><title>{}: {} B, cost {:.4g}</title></circle>\n",
                       x(p.recompute_cost), y(static_cast<double>(p.peak_bytes)), budget ? 4 : 3, color, XmlEscape(p.label), p.peak_bytes, p.recompute_cost);
    if (budget) line += fmt::format("{:.1f},{:.1f} ", x(p.recompute_cost), y(static_cast<double>(p.peak_bytes)));
  }
  svg += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"steelblue\"/>\n", line);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"red\">red: min cut</text><text x=\"{}\" y=\"{}\" fill=\"orange\">orange: inputs only</text>"
                     "<text x=\"{}\" y=\"{}\" fill=\"steelblue\">blue: budgets</text>\n", w - 150, top + 10, w - 150, top + 26, w - 150, top + 42);
  svg += "</svg>\n";
  return svg;
}

int RunPareto(const std::string& path, const PartitionFlags& flags, int points, const std::string& out,
              const std::string& plot) {
  auto request = flags.Request();
  if (!request.ok()) return Fail(request.status());
  // The destinations are checked before the solve as well as after it.
  std::vector<std::string> destinations;
  for (const std::string& file : {out, plot})
    if (!file.empty()) destinations.push_back(file);
  if (Status st = CheckSeparateDestinations(destinations); !st.ok()) return Fail(st);
  // An output over the input graph replaced it with the front (exit 0).
  for (const std::string& file : destinations)
    if (SamePath(file, path)) return Fail(Status::BadInput("is the input graph; nothing was written", file));
  auto graph = LoadForWork(path);
  if (!graph.ok()) return Fail(graph.status());
  if ((*graph)->kind() != GraphKind::kJoint)
    return Fail(Status::BadInput(fmt::format("expected a joint graph, got a {} graph", GraphKindName((*graph)->kind())), path));
  auto front = RunPeakFront(**graph, *request, points);
  if (!front.ok()) return Fail(front.status().WithContext(path));
  const std::string name = (*graph)->name().empty() ? fs::path(path).filename().string() : (*graph)->name();
  std::cout << fmt::format("{:<28} {:>14} {:>16} {:>14}\n", "point", "peak (B)", "recompute cost", "saved (B)");
  for (const FrontPoint& p : *front)
    std::cout << fmt::format("{:<28} {:>14} {:>16.6g} {:>14}\n", p.label, p.peak_bytes, p.recompute_cost, p.saved_bytes);
  std::vector<std::pair<std::string, std::string>> files;
  if (!out.empty()) files.emplace_back(out, FrontToJson(*front, name));
  if (!plot.empty()) files.emplace_back(plot, FrontToSvg(*front, name));
  if (Status st = WriteFilesTogether(files); !st.ok()) return Fail(st);
  for (const auto& [file, text] : files) std::cout << "wrote " << file << "\n";
  return kExitOk;
}

int RunVerify(const std::string& path, const std::string& dir, const std::string& seed_text, double tolerance_scale,
              const std::string& inputs_file) {
  // A seed is a whole number in [0, 2^64): CLI11 took "-1" (wrapped) and
  // 20-digit numbers past the range. A scale of 0, a negative one, inf or NaN
  // made every comparison pass or fail whatever the graphs computed.
  uint64_t seed = 0;
  const char* const seed_end = seed_text.data() + seed_text.size();
  if (auto [end, ec] = std::from_chars(seed_text.data(), seed_end, seed);
      seed_text.empty() || ec != std::errc() || end != seed_end)
    return Fail(Status::BadInput(fmt::format("expected a whole number from 0 to 2^64-1, got '{}'", seed_text), "--seed"));
  if (!std::isfinite(tolerance_scale) || tolerance_scale <= 0)
    return Fail(Status::BadInput(fmt::format("expected a finite number above 0, got {}", tolerance_scale),
                                 "--tolerance-scale"));
  auto joint = LoadForWork(path);
  if (!joint.ok()) return Fail(joint.status());
  auto forward = LoadForWork((fs::path(dir) / "forward.json").string());
  if (!forward.ok()) return Fail(forward.status());
  auto backward = LoadForWork((fs::path(dir) / "backward.json").string());
  if (!backward.ok()) return Fail(backward.status());
  const std::string sig_path = (fs::path(dir) / "signature.json").string();
  auto sig_text = ReadFileContents(sig_path);
  if (!sig_text.ok()) return Fail(sig_text.status());
  auto signature = SignatureFromJson(*sig_text, sig_path);
  if (!signature.ok()) return Fail(signature.status());
  Status check = CheckSignature(**forward, **backward, *signature);
  if (!check.ok()) {
    std::cerr << "fxremat: signature check failed: " << check.ToString() << "\n";
    return kExitVerifyFailed;
  }
  VerifyOptions options;
  options.seed = seed;
  options.tolerance_scale = tolerance_scale;
  options.inputs_file = inputs_file;
  auto plugin = TorchPlugin::Get();
  if (!plugin.ok()) return Fail(plugin.status());
  Status status;
  VerifyReport report_value;
  (*plugin)->verify(joint->get(), forward->get(), backward->get(), &*signature, &options, &status, &report_value);
  if (!status.ok()) return Fail(status);
  const VerifyReport* report = &report_value;
  for (const std::string& line : report->lines) std::cout << "  " << line << "\n";
  std::cout << fmt::format("verify {}: {} values compared: {}\n", path, report->values_compared,
                           report->passed ? "PASSED" : "FAILED");
  return report->passed ? kExitOk : kExitVerifyFailed;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fxremat: activation rematerialization for PyTorch joint graphs.\n"
               "Exit codes: 0 ok, 1 verification failed, 2 bad input or usage."};
  app.set_version_flag("--version", std::string("fxremat ") + FXREMAT_VERSION);
  app.require_subcommand(1);

  std::string graph_path, out_dir, print, output;
  std::string seed = "0";
  double tolerance_scale = 1.0;
  std::string inputs_file;

  auto* inspect = app.add_subcommand("inspect", "Node and op counts, forward/backward classification, activation bytes");
  inspect->add_option("graph", graph_path, "Graph file (.json, .json.gz or .fxir)")->required();

  auto* print_cmd = app.add_subcommand("print", "Print a graph in the IR text form, or convert it (-o FILE.json|.fxir)");
  print_cmd->add_option("graph", graph_path, "Graph file")->required();
  CLI::Option* print_output = print_cmd->add_option(
      "-o,--output", output, "Write to this file instead of stdout (.fxir → text, else JSON; .gz → gzipped)");

  PartitionFlags flags;
  auto* partition = app.add_subcommand("partition", "Split a joint graph into forward and backward graphs");
  partition->add_option("graph", graph_path, "Joint graph file")->required();
  flags.AddTo(partition);
  CLI::Option* partition_output =
      partition->add_option("-o,--output-dir", out_dir, "Write forward.json, backward.json, signature.json here");
  partition->add_option("--print", print, "Print the emitted graphs: code")->check(CLI::IsMember({"code"}));

  auto* residuals = app.add_subcommand("residuals", "Partition a joint graph and list what it saves for the "
                                       "backward (JAX's print_saved_residuals)");
  residuals->add_option("graph", graph_path, "Joint graph file")->required();
  flags.AddTo(residuals);

  int points = 20;
  std::string plot;
  auto* pareto = app.add_subcommand("pareto", "The step peak / recompute cost front of a joint graph: the budget "
                                    "solver's candidates and evenly spaced budgets (docs/budget.md)");
  pareto->add_option("graph", graph_path, "Joint graph file")->required();
  flags.AddTo(pareto, /*listed_memory_budget=*/false);
  pareto->add_option("--points", points, "Budgets from the smallest peak to the min cut's")->capture_default_str();
  CLI::Option* pareto_output = pareto->add_option("-o,--output", output, "Write the front as JSON here");
  CLI::Option* pareto_plot = pareto->add_option("--plot", plot, "Write the front as an SVG plot here");

  auto* verify = app.add_subcommand("verify", "Check a partition numerically against its joint graph (libtorch)");
  verify->add_option("graph", graph_path, "Joint graph file")->required();
  verify->add_option("partition_dir", out_dir, "Directory written by `fxremat partition -o`")->required();
  verify->add_option("--seed", seed, "Seed for the random inputs")->capture_default_str();
  verify->add_option("--tolerance-scale", tolerance_scale, "Multiply the dtype tolerances")->capture_default_str();
  verify->add_option("--inputs", inputs_file,
                     "Real inputs: a .safetensors file or a dict saved with torch.save, keyed by placeholder name "
                     "(primals_1, tangents_1) or input path (args[0]); the others are drawn at random");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "fxremat: usage error: " << e.what() << "\nRun 'fxremat --help' for usage.\n";
    return kExitBadInput;
  }
  // An empty path reads as no path at all: `-o ''` (a variable that was never
  // set) printed to stdout, or wrote nothing, and exited 0.
  for (const CLI::Option* option : {print_output, partition_output, pareto_output, pareto_plot}) {
    if (option->count() > 0 && option->as<std::string>().empty()) {
      std::cerr << "fxremat: error: " << option->get_name() << " takes a path, not an empty string\n";
      return kExitBadInput;
    }
  }
  // FXREMAT_PHASES=1: the time of each phase (read, parse, passes, solve,
  // write, ...) goes to stderr after the command (fxremat/phases.h).
  PhaseLog phases;
  const char* phases_env = std::getenv("FXREMAT_PHASES");
  const bool print_phases = phases_env && std::string_view(phases_env) == "1";
  ScopedPhaseLog phase_scope(print_phases ? &phases : nullptr);
  struct PrintPhasesAtExit {
    const PhaseLog* log;
    ~PrintPhasesAtExit() {
      if (log) std::cerr << log->ToText() << "peak-rss-kb " << PeakRssKb() << "\n";
    }
  } print_at_exit{print_phases ? &phases : nullptr};
  try {
    if (inspect->parsed()) return RunInspect(graph_path);
    if (print_cmd->parsed()) return RunPrint(graph_path, output);
    if (partition->parsed()) return RunPartitionCommand(graph_path, flags, out_dir, print);
    if (residuals->parsed()) return RunResiduals(graph_path, flags);
    if (pareto->parsed()) return RunPareto(graph_path, flags, points, output, plot);
    if (verify->parsed()) return RunVerify(graph_path, out_dir, seed, tolerance_scale, inputs_file);
  } catch (const std::bad_alloc&) {
    // Not a bug: the graph needs more memory than the process may have (a
    // ulimit, a container's limit; Note [Input size limit] refuses texts too
    // long for the machine before they are read).
    std::cerr << "fxremat: out of memory: " << graph_path
              << " needs more memory than this process can allocate (peak-rss-kb " << PeakRssKb() << ")\n";
    return kExitBadInput;
  } catch (const std::exception& e) {
    // The library reports errors as Status; anything thrown is a bug, but the
    // user still gets one line and a non-crash exit.
    std::cerr << "fxremat: internal error: " << e.what() << "\n";
    return kExitBadInput;
  }
  return kExitBadInput;
}
