// The built-in transforms and schedules, all written with the public DSL (dsl.h).
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "ir/dsl.h"

namespace optjit::dsl {

/// Every built-in: torch.optim optimizers (lowercased class names, torch's keyword names and
/// defaults), lion, lamb, clipping, grad_scaler, and the lr schedules.
const std::vector<std::shared_ptr<const Def>>& builtins();
std::shared_ptr<const Def> find_builtin(std::string_view name);

/// Binds a built-in by name, e.g. make("adamw", {{"lr", 1e-3}, {"weight_decay", 0.01}}).
Expected<std::shared_ptr<const Bound>> make(std::string_view name, Args args = {});

}  // namespace optjit::dsl
