// The text form of pipelines, as the CLI takes it:
//
//   chain(clip_grad_norm(max_norm=1.0),
//         adamw(lr=cosine_with_warmup(base_lr=1e-3, num_warmup_steps=100,
//                                     num_training_steps=10000), weight_decay=0.01))
//
// Custom transforms are declared before the pipeline, in the same language:
//
//   transform signum(lr=0.01, momentum=0.9) {
//     state momentum_buffer = 0
//     momentum_buffer = momentum * momentum_buffer + (1 - momentum) * grad
//     param = param - lr * sign(momentum_buffer)
//   }
//   chain(clip_grad_value(clip_value=1.0), signum(lr=0.02))
#pragma once

#include <string>
#include <string_view>

#include "ir/dsl.h"

namespace optjit::dsl {

/// Parses pipeline text. Errors name the line, the column and what was expected.
Expected<Pipeline> parse_pipeline(std::string_view text);

/// Functions usable inside a custom transform body, with one line each (for `optjit list`).
std::string describe_text_functions();

}  // namespace optjit::dsl
