// Checkpoint policies: parsing (CLI and JSON forms), evaluation per forward
// value, and the merge of all demands on a value (Notes in fxremat/policy.h).
#include "fxremat/policy.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fxremat/partition.h"
#include "src/facts_check.h"
#include "src/json_internal.h"
#include "src/partition_internal.h"

namespace fxremat {

// ---------------------------------------------------------------------------
// Decisions
// ---------------------------------------------------------------------------

std::string_view DecisionName(Decision d) {
  switch (d) {
    case Decision::kNone: return "";
    case Decision::kMustSave: return "MUST_SAVE";
    case Decision::kPreferSave: return "PREFER_SAVE";
    case Decision::kMustRecompute: return "MUST_RECOMPUTE";
    case Decision::kPreferRecompute: return "PREFER_RECOMPUTE";
    case Decision::kMustOffload: return "MUST_CPU_OFFLOAD";
    case Decision::kPreferOffload: return "PREFER_CPU_OFFLOAD";
  }
  return "";
}

std::optional<Decision> RecomputeTagFromName(std::string_view name) {
  for (Decision d : {Decision::kMustSave, Decision::kPreferSave, Decision::kMustRecompute, Decision::kPreferRecompute,
                     Decision::kMustOffload, Decision::kPreferOffload})
    if (DecisionName(d) == name) return d;
  return std::nullopt;
}

Expected<Decision> DecisionFromName(std::string_view name) {
  std::string_view n = name;
  if (n.rfind("CheckpointPolicy.", 0) == 0) n.remove_prefix(17);
  if (std::optional<Decision> d = RecomputeTagFromName(n)) return *d;
  return Status::BadInput(fmt::format("unknown checkpoint policy decision '{}' (MUST_SAVE, PREFER_SAVE, "
                                      "MUST_RECOMPUTE, PREFER_RECOMPUTE, MUST_CPU_OFFLOAD, PREFER_CPU_OFFLOAD)",
                                      name));
}

bool IsMust(Decision d) {
  return d == Decision::kMustSave || d == Decision::kMustRecompute || d == Decision::kMustOffload;
}
bool IsSave(Decision d) { return d == Decision::kMustSave || d == Decision::kPreferSave; }
bool IsRecompute(Decision d) { return d == Decision::kMustRecompute || d == Decision::kPreferRecompute; }
bool IsOffload(Decision d) { return d == Decision::kMustOffload || d == Decision::kPreferOffload; }

namespace {

// ---------------------------------------------------------------------------
// Kinds
// ---------------------------------------------------------------------------

enum class Arity { kNone, kNames, kSaveOffloadNames, kOffloadPlaces, kTwoBoolChildren, kOps, kTable, kChildren };

struct KindInfo {
  std::string_view name;
  Arity arity;
  bool boolean;  // returns saveable / not saveable only (save_from_both_policies accepts these)
};

constexpr KindInfo kKinds[] = {
    {"everything_saveable", Arity::kNone, true},
    {"nothing_saveable", Arity::kNone, true},
    {"dots_saveable", Arity::kNone, true},
    {"checkpoint_dots", Arity::kNone, true},
    {"dots_with_no_batch_dims_saveable", Arity::kNone, true},
    {"checkpoint_dots_with_no_batch_dims", Arity::kNone, true},
    {"save_only_these_names", Arity::kNames, true},
    {"save_any_names_but_these", Arity::kNames, true},
    {"save_anything_except_these_names", Arity::kNames, true},
    {"save_and_offload_only_these_names", Arity::kSaveOffloadNames, false},
    {"offload_dot_with_no_batch_dims", Arity::kOffloadPlaces, false},
    {"save_from_both_policies", Arity::kTwoBoolChildren, true},
    {"save_ops", Arity::kOps, false},
    {"checkpoint_policy", Arity::kTable, false},
    {"all_of", Arity::kChildren, false},
};

const KindInfo* FindKind(std::string_view name) {
  for (const KindInfo& k : kKinds)
    if (k.name == name) return &k;
  return nullptr;
}

std::string KnownKinds() {
  std::string out;
  for (const KindInfo& k : kKinds) out += (out.empty() ? "" : ", ") + std::string(k.name);
  return out;
}

std::string Quoted(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "'" : ", '") + n + "'";
  return out;
}

// Combinators (all_of, save_from_both_policies) nest at most this deep: each
// level is two levels of the JSON form ({"policies": [...]}), which must read
// back (kMaxJsonDepth); a list nested 200 deep was accepted, and its JSON form
// refused (found by tests/fuzz/fuzz_loader.cpp).
constexpr int kMaxPolicyNesting = (kMaxJsonDepth - 1) / 2;

std::vector<std::string> SplitList(std::string_view s, char sep);

bool IsIdentifier(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

// An operator as a policy names it, in the graph's spelling: "aten.mm" or
// "aten.mm.default". The other spellings PyTorch users write ("aten::mm",
// "torch.ops.aten.mm") mean the same op; policies.py's op_name normalizes them
// the same way, so that a policy matches the same ops from the CLI and from
// Python (an "aten::mm" on the command line matched nothing, silently).
Expected<std::string> NormalizedOpName(std::string_view op, const std::string& where) {
  std::string s(op);
  s.erase(0, s.find_first_not_of(" \t"));
  s.erase(s.find_last_not_of(" \t") + 1);
  if (s.rfind("torch.ops.", 0) == 0) s.erase(0, 10);
  for (size_t at = s.find("::"); at != std::string::npos; at = s.find("::", at)) s.replace(at, 2, ".");
  const std::vector<std::string> parts = SplitList(s, '.');
  bool ok = parts.size() >= 2 && parts.size() <= 3;
  for (const std::string& p : parts) ok = ok && IsIdentifier(p);
  if (!ok)
    return Status::BadInput(
        fmt::format("not an operator name: '{}' (expected 'aten.mm' or 'aten.mm.default')", op), where);
  return s;
}

bool IsMemoryKind(const std::string& place) { return place == "device" || place == "pinned_host"; }

// The checks both input forms share.
Status Validate(const PolicySpec& spec, const std::string& where, int depth = 0) {
  if (depth > kMaxPolicyNesting)
    return Status::BadInput(fmt::format("policies nest deeper than {} levels", kMaxPolicyNesting), where);
  const KindInfo* kind = FindKind(spec.kind);
  if (!kind) return Status::BadInput(fmt::format("unknown policy '{}' (known: {})", spec.kind, KnownKinds()), where);
  // As policies.py's constructors refuse them: JAX's memory kinds are the only places.
  for (const std::string* place : {&spec.offload_src, &spec.offload_dst})
    if (!IsMemoryKind(*place))
      return Status::BadInput(fmt::format("{}: an offload place must be 'device' or 'pinned_host', not '{}'",
                                          spec.kind, *place),
                              where);
  for (const std::string& name : spec.names)
    if (name.empty()) return Status::BadInput(fmt::format("policy {}: an empty name", spec.kind), where);
  for (const std::string& name : spec.offload_names)
    if (name.empty()) return Status::BadInput(fmt::format("policy {}: an empty name", spec.kind), where);
  if (kind->arity == Arity::kNames && spec.names.empty())
    return Status::BadInput(fmt::format("policy {} needs at least one name", spec.kind), where);
  if (kind->arity == Arity::kSaveOffloadNames) {
    std::set<std::string> saved(spec.names.begin(), spec.names.end()), both;
    for (const std::string& n : spec.offload_names)
      if (saved.count(n)) both.insert(n);
    if (!both.empty())
      return Status::BadInput(
          fmt::format("save_and_offload_only_these_names: the names should be exclusive, but {} {} both in "
                      "names_which_can_be_saved [{}] and names_which_can_be_offloaded [{}]",
                      Quoted({both.begin(), both.end()}), both.size() == 1 ? "is" : "are", Quoted(spec.names),
                      Quoted(spec.offload_names)),
          where);
  }
  if (kind->arity == Arity::kOps && spec.ops.empty())
    return Status::BadInput("policy save_ops needs at least one op", where);
  if (kind->arity == Arity::kTwoBoolChildren) {
    if (spec.children.size() != 2)
      return Status::BadInput(fmt::format("save_from_both_policies takes exactly two policies, not {}",
                                          spec.children.size()),
                              where);
    for (const PolicySpec& child : spec.children) {
      const KindInfo* ck = FindKind(child.kind);
      if (ck && !ck->boolean)
        return Status::BadInput(fmt::format("save_from_both_policies combines policies that answer saveable or "
                                            "not; {} can also offload or force a decision. Combine it with "
                                            "all_of ('+' on the command line) instead",
                                            child.kind),
                                where);
    }
  }
  if (kind->arity == Arity::kChildren && spec.children.empty())
    return Status::BadInput("all_of needs at least one policy", where);
  for (size_t i = 0; i < spec.children.size(); ++i)
    FXREMAT_RETURN_IF_ERROR(Validate(spec.children[i], fmt::format("{}/policies[{}]", where, i), depth + 1));
  return Status::Ok();
}

std::vector<std::string> SplitList(std::string_view s, char sep) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    std::string item(s.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    // Trim spaces.
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    out.push_back(item);
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

// Splits on `sep` outside parentheses.
std::vector<std::string> SplitTopLevel(std::string_view s, char sep) {
  std::vector<std::string> out;
  int depth = 0;
  std::string cur;
  for (char c : s) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == sep && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

Expected<PolicySpec> ParseOne(std::string_view text) {
  PolicySpec spec;
  std::string_view body = text;
  size_t colon = text.find(':');
  std::string_view args;
  if (colon != std::string_view::npos) {
    body = text.substr(0, colon);
    args = text.substr(colon + 1);
  }
  spec.kind = std::string(body);
  const std::string where = fmt::format("--policy '{}'", text);
  const KindInfo* kind = FindKind(spec.kind);
  if (!kind) return Status::BadInput(fmt::format("unknown policy '{}' (known: {})", spec.kind, KnownKinds()), where);
  auto no_args = [&]() -> Status {
    if (!args.empty()) return Status::BadInput(fmt::format("policy {} takes no arguments", spec.kind), where);
    return Status::Ok();
  };
  switch (kind->arity) {
    case Arity::kNone: FXREMAT_RETURN_IF_ERROR(no_args()); break;
    case Arity::kNames: spec.names = SplitList(args, ','); break;
    case Arity::kOps: spec.ops = SplitList(args, ','); break;
    case Arity::kSaveOffloadNames: {
      // save=a,b;offload=c[;src=device;dst=pinned_host]
      for (const std::string& part : SplitList(args, ';')) {
        size_t eq = part.find('=');
        if (eq == std::string::npos)
          return Status::BadInput(fmt::format("expected save=NAMES;offload=NAMES, got '{}'", part), where);
        std::string key = part.substr(0, eq), value = part.substr(eq + 1);
        if (key == "save") spec.names = SplitList(value, ',');
        else if (key == "offload") spec.offload_names = SplitList(value, ',');
        else if (key == "src") spec.offload_src = value;
        else if (key == "dst") spec.offload_dst = value;
        else return Status::BadInput(fmt::format("unknown key '{}' (save, offload, src, dst)", key), where);
      }
      break;
    }
    case Arity::kOffloadPlaces: {
      std::vector<std::string> places = SplitList(args, ',');
      if (places.size() == 2) {
        spec.offload_src = places[0];
        spec.offload_dst = places[1];
      } else if (!places.empty()) {
        return Status::BadInput("offload_dot_with_no_batch_dims takes SRC,DST (e.g. device,pinned_host)", where);
      }
      break;
    }
    case Arity::kTwoBoolChildren: {
      for (const std::string& child : SplitTopLevel(args, '|')) {
        FXREMAT_ASSIGN_OR_RETURN(PolicySpec c, ParseOne(child));
        spec.children.push_back(std::move(c));
      }
      break;
    }
    case Arity::kTable: {
      // a=MUST_SAVE,b=PREFER_RECOMPUTE;op:aten.mm=MUST_SAVE;default=PREFER_RECOMPUTE
      bool default_given = false;
      for (const std::string& part : SplitList(args, ';')) {
        std::string items = part;
        bool ops = false;
        if (items.rfind("op:", 0) == 0) { ops = true; items = items.substr(3); }
        for (const std::string& item : SplitList(items, ',')) {
          size_t eq = item.find('=');
          if (eq == std::string::npos)
            return Status::BadInput(fmt::format("expected NAME=DECISION, got '{}'", item), where);
          std::string key = item.substr(0, eq);
          FXREMAT_ASSIGN_OR_RETURN(Decision d, DecisionFromName(item.substr(eq + 1)));
          // A key given twice: which decision was meant is anyone's guess (the last
          // one was kept, silently).
          const bool repeated = (!ops && key == "default") ? std::exchange(default_given, true)
                                                           : !(ops ? spec.by_op : spec.by_name).emplace(key, d).second;
          if (repeated)
            return Status::BadInput(fmt::format("'{}{}' is given twice", ops ? "op:" : "", key), where);
          if (!ops && key == "default") spec.default_decision = d;
        }
      }
      break;
    }
    case Arity::kChildren: return Status::BadInput("write all_of as POLICY+POLICY", where);
  }
  return spec;
}

using json = nlohmann::json;

Expected<std::vector<std::string>> StringList(const json& j, const std::string& key, const std::string& where) {
  std::vector<std::string> out;
  if (!j.contains(key)) return out;
  const json& v = j.at(key);
  if (v.is_string()) return std::vector<std::string>{v.get<std::string>()};
  if (!v.is_array()) return Status::BadInput(fmt::format("'{}' must be a list of strings", key), where + "/" + key);
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string())
      return Status::BadInput(fmt::format("'{}' must be a list of strings", key), fmt::format("{}/{}[{}]", where, key, i));
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

Expected<std::map<std::string, Decision>> DecisionTable(const json& j, const std::string& key, const std::string& where) {
  std::map<std::string, Decision> out;
  if (!j.contains(key)) return out;
  const json& v = j.at(key);
  if (!v.is_object()) return Status::BadInput(fmt::format("'{}' must map names to decisions", key), where + "/" + key);
  for (const auto& [k, d] : v.items()) {
    if (!d.is_string()) return Status::BadInput("a decision must be a string", where + "/" + key + "/" + k);
    auto decision = DecisionFromName(d.get<std::string>());
    if (!decision.ok()) return Status::BadInput(decision.status().message(), where + "/" + key + "/" + k);
    out[k] = *decision;
  }
  return out;
}

Expected<PolicySpec> FromJson(const json& j, const std::string& where) {
  if (j.is_array()) {
    PolicySpec spec;
    spec.kind = "all_of";
    for (size_t i = 0; i < j.size(); ++i) {
      FXREMAT_ASSIGN_OR_RETURN(PolicySpec c, FromJson(j[i], fmt::format("{}[{}]", where, i)));
      spec.children.push_back(std::move(c));
    }
    return spec;
  }
  if (!j.is_object()) return Status::BadInput("a policy is an object {\"policy\": NAME, ...} or a list of them", where);
  if (!j.contains("policy") || !j["policy"].is_string())
    return Status::BadInput("a policy object needs \"policy\": NAME", where);
  static const std::set<std::string> kKeys = {"policy", "names", "offload_names", "ops", "by_name", "by_op",
                                              "default", "offload_src", "offload_dst", "policies",
                                              "names_which_can_be_saved", "names_which_can_be_offloaded"};
  for (const auto& item : j.items())
    if (!kKeys.count(item.key())) return Status::BadInput(fmt::format("unknown key '{}'", item.key()), where);
  PolicySpec spec;
  spec.kind = j["policy"].get<std::string>();
  FXREMAT_ASSIGN_OR_RETURN(spec.names, StringList(j, "names", where));
  FXREMAT_ASSIGN_OR_RETURN(std::vector<std::string> saved, StringList(j, "names_which_can_be_saved", where));
  spec.names.insert(spec.names.end(), saved.begin(), saved.end());
  FXREMAT_ASSIGN_OR_RETURN(spec.offload_names, StringList(j, "offload_names", where));
  FXREMAT_ASSIGN_OR_RETURN(std::vector<std::string> off, StringList(j, "names_which_can_be_offloaded", where));
  spec.offload_names.insert(spec.offload_names.end(), off.begin(), off.end());
  FXREMAT_ASSIGN_OR_RETURN(spec.ops, StringList(j, "ops", where));
  FXREMAT_ASSIGN_OR_RETURN(spec.by_name, DecisionTable(j, "by_name", where));
  FXREMAT_ASSIGN_OR_RETURN(spec.by_op, DecisionTable(j, "by_op", where));
  if (j.contains("default") && !j["default"].is_null()) {
    if (!j["default"].is_string()) return Status::BadInput("'default' must be a decision name", where + "/default");
    auto d = DecisionFromName(j["default"].get<std::string>());
    if (!d.ok()) return Status::BadInput(d.status().message(), where + "/default");
    spec.default_decision = *d;
  }
  for (const char* key : {"offload_src", "offload_dst"}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_string()) return Status::BadInput(fmt::format("'{}' must be a string", key), where + "/" + key);
    (std::string(key) == "offload_src" ? spec.offload_src : spec.offload_dst) = j[key].get<std::string>();
  }
  if (j.contains("policies")) {
    if (!j["policies"].is_array()) return Status::BadInput("'policies' must be a list", where + "/policies");
    for (size_t i = 0; i < j["policies"].size(); ++i) {
      FXREMAT_ASSIGN_OR_RETURN(PolicySpec c, FromJson(j["policies"][i], fmt::format("{}/policies[{}]", where, i)));
      spec.children.push_back(std::move(c));
    }
  }
  return spec;
}

json ToJsonValue(const PolicySpec& spec) {
  json j = json::object();
  j["policy"] = spec.kind;
  if (!spec.names.empty()) j["names"] = spec.names;
  if (!spec.offload_names.empty()) j["offload_names"] = spec.offload_names;
  if (!spec.ops.empty()) j["ops"] = spec.ops;
  auto table = [](const std::map<std::string, Decision>& m) {
    json t = json::object();
    for (const auto& [k, d] : m) t[k] = std::string(DecisionName(d));
    return t;
  };
  if (!spec.by_name.empty()) j["by_name"] = table(spec.by_name);
  if (!spec.by_op.empty()) j["by_op"] = table(spec.by_op);
  if (spec.default_decision != Decision::kNone) j["default"] = std::string(DecisionName(spec.default_decision));
  const KindInfo* kind = FindKind(spec.kind);
  if (kind && (kind->arity == Arity::kSaveOffloadNames || kind->arity == Arity::kOffloadPlaces)) {
    j["offload_src"] = spec.offload_src;
    j["offload_dst"] = spec.offload_dst;
  }
  if (!spec.children.empty()) {
    json children = json::array();
    for (const PolicySpec& c : spec.children) children.push_back(ToJsonValue(c));
    j["policies"] = children;
  }
  return j;
}

}  // namespace

std::string PolicySpec::ToString() const {
  const KindInfo* k = FindKind(kind);
  const Arity arity = k ? k->arity : Arity::kNone;
  switch (arity) {
    case Arity::kNone: return kind;
    case Arity::kNames: return fmt::format("{}({})", kind, Quoted(names));
    case Arity::kOps: return fmt::format("{}({})", kind, Quoted(ops));
    case Arity::kSaveOffloadNames:
      return fmt::format("{}(names_which_can_be_saved=[{}], names_which_can_be_offloaded=[{}])", kind, Quoted(names),
                         Quoted(offload_names));
    case Arity::kOffloadPlaces: return fmt::format("{}('{}', '{}')", kind, offload_src, offload_dst);
    case Arity::kTable: {
      std::string items;
      auto add = [&](const std::string& s) { items += (items.empty() ? "" : ", ") + s; };
      for (const auto& [n, d] : by_name) add(fmt::format("'{}': {}", n, DecisionName(d)));
      for (const auto& [o, d] : by_op) add(fmt::format("{}: {}", o, DecisionName(d)));
      if (default_decision != Decision::kNone) add(fmt::format("default: {}", DecisionName(default_decision)));
      return fmt::format("{}({{{}}})", kind, items);
    }
    case Arity::kTwoBoolChildren:
    case Arity::kChildren: {
      std::string items;
      for (const PolicySpec& c : children) items += (items.empty() ? "" : ", ") + c.ToString();
      return fmt::format("{}({})", kind, items);
    }
  }
  return kind;
}

// The ops of `spec` and its children (save_ops' list, checkpoint_policy's by_op
// keys) in the graph's spelling (NormalizedOpName). Two spellings of one op in
// a by_op table are refused: which decision holds would depend on the order.
Status NormalizeOps(PolicySpec& spec, const std::string& where) {
  for (std::string& op : spec.ops) {
    FXREMAT_ASSIGN_OR_RETURN(std::string name, NormalizedOpName(op, where));
    op = std::move(name);
  }
  std::map<std::string, Decision> by_op;
  for (const auto& [op, d] : spec.by_op) {
    FXREMAT_ASSIGN_OR_RETURN(std::string name, NormalizedOpName(op, where));
    if (!by_op.emplace(name, d).second)
      return Status::BadInput(fmt::format("checkpoint_policy: the op {} is given twice", name), where);
  }
  spec.by_op = std::move(by_op);
  for (PolicySpec& child : spec.children) FXREMAT_RETURN_IF_ERROR(NormalizeOps(child, where));
  return Status::Ok();
}

Expected<PolicySpec> ParsePolicy(std::string_view text) {
  // Policy names end up in JSON (the policy's JSON form, reports): a --policy
  // that is not UTF-8 made the JSON library throw (found by the fuzzer).
  if (Status utf8 = CheckUtf8(text, "a policy"); !utf8.ok()) return utf8.WithContext("--policy");
  std::vector<std::string> parts = SplitTopLevel(text, '+');
  PolicySpec spec;
  if (parts.size() == 1) {
    if (parts[0].empty()) return Status::BadInput("empty --policy");
    FXREMAT_ASSIGN_OR_RETURN(spec, ParseOne(parts[0]));
  } else {
    spec.kind = "all_of";
    for (const std::string& part : parts) {
      FXREMAT_ASSIGN_OR_RETURN(PolicySpec c, ParseOne(part));
      spec.children.push_back(std::move(c));
    }
  }
  FXREMAT_RETURN_IF_ERROR(NormalizeOps(spec, fmt::format("--policy '{}'", text)));
  FXREMAT_RETURN_IF_ERROR(Validate(spec, fmt::format("--policy '{}'", text)));
  return spec;
}

Expected<PolicySpec> PolicyFromJson(std::string_view text, std::string_view where) {
  if (Status depth = CheckJsonDepth(text, "the policy JSON"); !depth.ok()) return depth.WithContext(std::string(where));
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 3, column 5: ...": the
    // line and column, which "malformed policy JSON" alone did not give.
    std::string what = e.what();
    if (auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
    return Status::BadInput(fmt::format("malformed policy JSON: {}", what), std::string(where));
  }
  FXREMAT_ASSIGN_OR_RETURN(PolicySpec spec, FromJson(j, std::string(where)));
  FXREMAT_RETURN_IF_ERROR(NormalizeOps(spec, std::string(where)));
  FXREMAT_RETURN_IF_ERROR(Validate(spec, std::string(where)));
  return spec;
}

std::string PolicyToJson(const PolicySpec& spec) { return ToJsonValue(spec).dump(); }

// ---------------------------------------------------------------------------
// Evaluation
// ---------------------------------------------------------------------------

namespace {

std::string_view PacketOf(std::string_view target) {
  size_t last_dot = target.rfind('.');
  return last_dot == std::string_view::npos ? target : target.substr(0, last_dot);
}

// The node whose op computed this value: a getitem's producer, else the node.
const Node& ProducerOf(const Node& n) {
  if (n.isGetItem() && !n.args().empty() && n.args()[0].is_node()) return *n.args()[0].node;
  return n;
}

int64_t RankOf(const Argument& a) {
  if (!a.is_node() || !a.node->val().is_tensor()) return -1;
  return static_cast<int64_t>(a.node->val().tensor.shape.size());
}

// Whether an einsum equation ("bij,bjk->bik") has an index in both operands
// and in the output: a batch dimension of the dot_general it lowers to.
bool EinsumHasBatchDims(const Node& n) {
  if (n.args().empty() || n.args()[0].kind != Argument::Kind::kString) return true;
  const std::string& eq = n.args()[0].text;
  size_t arrow = eq.find("->");
  if (arrow == std::string::npos) return true;
  std::vector<std::string> operands = SplitList(eq.substr(0, arrow), ',');
  if (operands.size() != 2) return true;
  const std::string out = eq.substr(arrow + 2);
  for (char c : operands[0])
    if (std::isalpha(static_cast<unsigned char>(c)) && operands[1].find(c) != std::string::npos &&
        out.find(c) != std::string::npos)
      return true;
  return false;
}

// JAX's dot_general_p, read on aten ops: matrix products. `batch` tells whether
// the product has batch dimensions (bmm, baddbmm; matmul/einsum by shape).
bool IsDot(const Node& n, bool* batch) {
  const std::string_view p = PacketOf(n.target());
  static const std::unordered_set<std::string_view> kNoBatch = {
      "aten.mm", "aten.addmm", "aten.mv", "aten.addmv", "aten.dot", "aten.vdot", "aten.linear", "aten._scaled_mm",
      "aten.addr", "aten.outer", "aten.ger", "aten.inner"};
  static const std::unordered_set<std::string_view> kBatch = {"aten.bmm", "aten.baddbmm", "aten.addbmm"};
  if (kNoBatch.count(p)) { *batch = false; return true; }
  if (kBatch.count(p)) {
    // addbmm reduces over the batch: still a dot_general with batch dims.
    *batch = true;
    return true;
  }
  if (p == "aten.matmul" && n.args().size() >= 2) {
    *batch = RankOf(n.args()[0]) >= 3 && RankOf(n.args()[1]) >= 3;
    return true;
  }
  if (p == "aten.einsum") { *batch = EinsumHasBatchDims(n); return true; }
  return false;
}

bool IsConvolution(const Node& n) {
  const std::string_view p = PacketOf(n.target());
  return p == "aten.convolution" || p == "aten._convolution" || p == "aten.conv1d" || p == "aten.conv2d" ||
         p == "aten.conv3d" || p == "aten.conv_transpose1d" || p == "aten.conv_transpose2d" ||
         p == "aten.conv_transpose3d";
}

bool AnyNameIn(const Node& n, const std::vector<std::string>& names) {
  for (const std::string& name : n.meta().names)
    if (std::find(names.begin(), names.end(), name) != names.end()) return true;
  return false;
}

bool AnyNameNotIn(const Node& n, const std::vector<std::string>& names) {
  for (const std::string& name : n.meta().names)
    if (std::find(names.begin(), names.end(), name) == names.end()) return true;
  return false;
}

Decision Bool(bool saveable) { return saveable ? Decision::kPreferSave : Decision::kPreferRecompute; }

// One demand per child of all_of; one for every other kind.
void Evaluate(const PolicySpec& spec, const Node& value, std::vector<ValueDemand>& out) {
  const Node& op = ProducerOf(value);
  bool batch = false;
  Decision d = Decision::kNone;
  const std::string& k = spec.kind;
  if (k == "all_of") {
    for (const PolicySpec& c : spec.children) Evaluate(c, value, out);
    return;
  }
  if (k == "everything_saveable") d = Decision::kPreferSave;
  else if (k == "nothing_saveable") d = Decision::kPreferRecompute;
  else if (k == "dots_saveable" || k == "checkpoint_dots") d = Bool(IsDot(op, &batch) || IsConvolution(op));
  else if (k == "dots_with_no_batch_dims_saveable" || k == "checkpoint_dots_with_no_batch_dims")
    d = Bool(IsDot(op, &batch) && !batch);
  else if (k == "save_only_these_names") d = Bool(AnyNameIn(value, spec.names));
  else if (k == "save_any_names_but_these") d = Bool(AnyNameNotIn(value, spec.names));
  else if (k == "save_anything_except_these_names") d = Bool(!AnyNameIn(value, spec.names));
  else if (k == "save_and_offload_only_these_names") {
    d = AnyNameIn(value, spec.names)           ? Decision::kPreferSave
        : AnyNameIn(value, spec.offload_names) ? Decision::kPreferOffload
                                               : Decision::kPreferRecompute;
  } else if (k == "offload_dot_with_no_batch_dims") {
    d = IsDot(op, &batch) && !batch ? Decision::kPreferOffload : Decision::kPreferRecompute;
  } else if (k == "save_from_both_policies") {
    std::vector<ValueDemand> both;
    for (const PolicySpec& c : spec.children) Evaluate(c, value, both);
    bool saveable = false;
    for (const ValueDemand& b : both) saveable = saveable || IsSave(b.decision);
    d = Bool(saveable);
  } else if (k == "save_ops") {
    const std::string_view target = op.target();
    bool listed = false;
    for (const std::string& o : spec.ops) listed = listed || o == target || o == PacketOf(target);
    d = listed ? Decision::kMustSave : Decision::kPreferRecompute;
  } else if (k == "checkpoint_policy") {
    d = spec.default_decision;
    bool by_name = false;
    for (const std::string& name : value.meta().names) {
      auto it = spec.by_name.find(name);
      if (it != spec.by_name.end()) { d = it->second; by_name = true; break; }
    }
    if (!by_name) {
      auto it = spec.by_op.find(op.target());
      if (it == spec.by_op.end()) it = spec.by_op.find(std::string(PacketOf(op.target())));
      if (it != spec.by_op.end()) d = it->second;
    }
  }
  if (d != Decision::kNone) out.push_back({const_cast<Node*>(&value), d, "", &spec});
}

// Why `n` cannot be moved to host memory, or "" if it can.
std::string CannotMove(const Node& n, const std::vector<Node*>& inputs) {
  if (n.val().is_sym()) return "it is a symbolic scalar, kept on the autograd context, not in device memory";
  if (!n.val().is_tensor()) return "it is not a tensor";
  if (n.isPlaceholder()) return "it is an input of the graph: its memory belongs to the caller";
  const int64_t storage = n.val().tensor.storage;
  if (storage >= 0)
    for (const Node* in : inputs)
      if (in->val().is_tensor() && in->val().tensor.storage == storage)
        return fmt::format("it is a view of the input {}: its memory belongs to the caller", in->name());
  return "";
}

std::string Describe(const Node& n) {
  std::string s = fmt::format("'{}'", n.name());
  if (!n.meta().names.empty()) s += fmt::format(" (named {})", Quoted(n.meta().names));
  if (n.isCallFunction()) s += fmt::format(", output of {}", n.target());
  return s;
}

}  // namespace

Expected<std::vector<ValueDemand>> ApplyPolicy(Graph& g, const PolicySpec* spec) {
  FXREMAT_ASSIGN_OR_RETURN(JointClassification c, ClassifyJoint(g));
  const std::vector<Node*>& inputs = c.primals;
  std::vector<ValueDemand> decided;
  for (const auto& up : g.nodes()) {
    Node& n = *up;
    if (n.isOutput() || c.in_tangents_closure[n.index()]) continue;
    // Demands from the node itself (Note [Merging demands], rule 3: these beat a
    // policy's PREFER demands).
    std::vector<ValueDemand> own, policy;
    if (n.meta().recompute != Decision::kNone)
      own.push_back({&n, n.meta().recompute, "recompute tag " + std::string(DecisionName(n.meta().recompute))});
    if (n.meta().offload_requested)
      own.push_back({&n, Decision::kPreferOffload, "xla::offload_name annotation"});
    // Note [Policy semantics]: an unnamed view is recomputed from its base.
    const OpInfo* info = n.isCallFunction() ? n.opInfo() : nullptr;
    const bool unnamed_view = info && info->schema.returnsAlias() && n.meta().names.empty();
    // A multi-output op (a tuple, read through getitems) gets the demand too, as
    // JAX's policy decides per primitive: otherwise the min cut's heuristics
    // would ban recomputing it and force its getitems to be saved.
    const bool is_tuple = n.val().kind == ValueFacts::Kind::kTuple;
    // Note [Inductor's seeds are not the program's]: Inductor's lowering of
    // random ops (fallback_random off, its default) draws one seeds tensor,
    // prims.inductor_seeds(count, device), at the top of the joint graph, and
    // every rand/randn/dropout of the program becomes a deterministic
    // prims.inductor_random of one seed. The seeds op is Inductor's bookkeeping,
    // not a value of the program a policy names or classes: left to a policy it
    // got PREFER_RECOMPUTE and was replayed (run_and_save_rng_state, whose eager
    // implementation draws other seeds than Inductor's generated code from the
    // same generator state: valid draws, replayed exactly, but not the numbers
    // PyTorch's compile draws for the same manual_seed; and a 5,056-byte CPU
    // generator state saved for a 48-byte tensor). Outside the policy it is a
    // random op with no tag: saved, as PyTorch's partitioner saves it.
    const bool inductor_seeds = n.isCallFunction() && n.target() == "prims.inductor_seeds.default";
    const bool policy_applies = spec && n.isCallFunction() && (n.val().is_tensor() || is_tuple) &&
                                !IsAnnotationOp(n.target()) && !unnamed_view && !inductor_seeds;
    if (policy_applies) Evaluate(*spec, n, policy);
    // An input is always available (JAX's arguments are): a policy's save or
    // recompute demand on a named input means nothing, but an offload demand
    // cannot be honoured (rule 5).
    if (spec && n.isPlaceholder() && !n.meta().names.empty()) {
      std::vector<ValueDemand> on_input;
      Evaluate(*spec, n, on_input);
      for (const ValueDemand& d : on_input)
        if (IsOffload(d.decision)) own.push_back(d);
    }
    if (spec && unnamed_view && (n.val().is_tensor() || is_tuple))
      policy.push_back({&n, Decision::kPreferRecompute, "policy: an unnamed view is recomputed from its base"});
    if (own.empty() && policy.empty()) continue;

    auto contradiction = [&](const char* what, const ValueDemand& a, const ValueDemand& b) {
      return Status::BadInput(fmt::format("contradictory {} on value {}: {} ({}) and {} ({})", what, Describe(n),
                                          DecisionName(a.decision), a.Source(), DecisionName(b.decision), b.Source()),
                              fmt::format("node '{}'", n.name()));
    };
    // Rule 1 and 2: MUST demands.
    const ValueDemand* must = nullptr;
    for (const auto* list : {&own, &policy})
      for (const ValueDemand& d : *list) {
        if (!IsMust(d.decision)) continue;
        if (must && must->decision != d.decision) return contradiction("demands", *must, d);
        if (!must) must = &d;
      }
    ValueDemand result;
    if (must) {
      result = *must;
    } else if (!own.empty()) {
      // Rule 3: the node's own demands. An annotation (offload_name) is more
      // specific than a region's recompute tag.
      result = own.back();
    } else {
      // Rule 4: among a policy's PREFER demands, saving beats recomputing.
      const ValueDemand* keep = nullptr;
      for (const ValueDemand& d : policy) {
        if (IsRecompute(d.decision)) continue;
        if (keep && keep->decision != d.decision) return contradiction("policies", *keep, d);
        if (!keep) keep = &d;
      }
      result = keep ? *keep : policy.front();
    }
    // Rule 5: demands that cannot be honoured.
    if (result.decision == Decision::kMustRecompute && IsRandomOp(ProducerOf(n)) && !RandomOpReplayable(ProducerOf(n)))
      return Status::BadInput(fmt::format("value {}: MUST_RECOMPUTE ({}) cannot be honoured: it is a random op, "
                                          "and {}: recomputing it would draw different numbers; save it instead",
                                          Describe(n), result.Source(), UnreplayableReason(ProducerOf(n))),
                              fmt::format("node '{}'", n.name()));
    // A tuple is never saved itself; its getitems carry any offload.
    if (is_tuple && IsOffload(result.decision))
      result.decision = IsMust(result.decision) ? Decision::kMustSave : Decision::kPreferSave;
    if (IsOffload(result.decision)) {
      std::string why = CannotMove(n, inputs);
      if (!why.empty())
        return Status::BadInput(fmt::format("value {}: {} ({}) cannot be honoured: {}", Describe(n),
                                            DecisionName(result.decision), result.Source(), why),
                                fmt::format("node '{}'", n.name()));
    }
    n.meta().recompute = result.decision;
    decided.push_back(result);
  }
  return decided;
}

}  // namespace fxremat
