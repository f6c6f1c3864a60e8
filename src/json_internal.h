// JSON documents as nlohmann values (private to src/ and the Python binding):
// the binding converts Python dicts to and from these directly, with no JSON
// text in between.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "fxremat/ir.h"
#include "fxremat/partition.h"
#include "fxremat/status.h"

namespace fxremat {

Expected<std::unique_ptr<Graph>> GraphFromJsonDocument(const nlohmann::json& doc);
nlohmann::ordered_json GraphToJsonDocument(const Graph& graph);
nlohmann::ordered_json SignatureToJsonDocument(const Signature& signature);

}  // namespace fxremat
