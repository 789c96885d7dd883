#include "runtime/state.h"

#include <atomic>

#include <fmt/ranges.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

namespace optjit::runtime {

namespace {

// `bytes` of zeros for buffer `b` of tensor t, or an error naming them when they do not fit.
Status allocate(std::vector<uint8_t>& buf, size_t bytes, const ir::BufferDecl& b,
                const TensorState& t) {
  try {
    buf.assign(bytes, 0);
  } catch (const std::bad_alloc&) {
    return make_error("out of memory: {} '{}' of parameter '{}' needs {} bytes", to_string(b.role),
                      b.name, t.name, bytes);
  }
  return Status::Ok();
}

}  // namespace

uint64_t BindingEpoch::next() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}

using ir::BufferRole;

bool glob_match(std::string_view p, std::string_view n) {
  size_t pi = 0, ni = 0, star = std::string_view::npos, mark = 0;
  while (ni < n.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == n[ni]))
      ++pi, ++ni;
    else if (pi < p.size() && p[pi] == '*')
      star = pi++, mark = ni;
    else if (star != std::string_view::npos)
      pi = star + 1, ni = ++mark;
    else
      return false;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

Expected<std::vector<uint32_t>> match_hyper(const ir::Program& p, std::string_view name) {
  std::vector<uint32_t> exact, suffix;
  for (uint32_t i = 0; i < p.hypers.size(); ++i) {
    const std::string& h = p.hypers[i].name;
    if (h == name) exact.push_back(i);
    // Component-wise suffix: "lr" matches "adamw.lr"; "betas" matches "adamw.betas.0".
    for (size_t pos = 0; pos < h.size();) {
      size_t dot = h.find('.', pos);
      std::string_view rest = std::string_view(h).substr(pos);
      if (rest == name)
        suffix.push_back(i);
      else if (dot != std::string::npos && rest.size() > name.size() &&
               rest.substr(0, name.size()) == name && rest[name.size()] == '.' &&
               rest.find_first_not_of("0123456789", name.size() + 1) == std::string_view::npos)
        suffix.push_back(i);
      if (dot == std::string::npos) break;
      pos = dot + 1;
    }
  }
  if (!exact.empty()) return exact;
  std::sort(suffix.begin(), suffix.end());
  suffix.erase(std::unique(suffix.begin(), suffix.end()), suffix.end());
  // A short name must not span two transforms (e.g. "lr" with two optimizers in the chain).
  std::vector<std::string> owners;
  for (uint32_t i : suffix) {
    const std::string& h = p.hypers[i].name;
    std::string base = h;
    if (size_t d = h.rfind('.');
        d != std::string::npos && h.find_first_not_of("0123456789", d + 1) == std::string::npos)
      base = h.substr(0, d);
    if (std::find(owners.begin(), owners.end(), base) == owners.end()) owners.push_back(base);
  }
  if (owners.size() > 1)
    return make_error("hyperparameter '{}' is ambiguous: {}", name, fmt::join(owners, ", "));
  if (suffix.empty()) {
    std::vector<std::string> all;
    for (const auto& h : p.hypers) all.push_back(h.name);
    return make_error("no hyperparameter '{}' (this pipeline has: {})", name, fmt::join(all, ", "));
  }
  // A tuple's elements in element order ("step_sizes.0", "step_sizes.1"), whatever order the
  // program declares them in: set_hyper assigns values in this order.
  auto element = [&](uint32_t i) {
    const std::string& h = p.hypers[i].name;
    const size_t d = h.rfind('.');
    if (d == std::string::npos || h.find_first_not_of("0123456789", d + 1) != std::string::npos)
      return 0L;
    return std::stol(h.substr(d + 1));
  };
  std::stable_sort(suffix.begin(), suffix.end(),
                   [&](uint32_t a, uint32_t b) { return element(a) < element(b); });
  return suffix;
}

Expected<std::vector<uint32_t>> check_set_hyper(const ir::Program& p, const OptimizerState& s,
                                                std::string_view name,
                                                const std::vector<double>& values,
                                                std::optional<uint32_t> group) {
  auto idx = match_hyper(p, name);
  if (!idx) return idx.error();
  // Every element of a tuple, each its own value: one value for all of them (betas = 0.95 both
  // betas, where the caller meant one) would be silently other numbers.
  if (values.size() != idx->size()) {
    if (idx->size() == 1)
      return make_error("hyperparameter '{}' takes 1 value, got {}", name, values.size());
    std::vector<std::string> names;
    for (uint32_t i : *idx) names.push_back(p.hypers[i].name);
    return make_error(
        "hyperparameter '{}' has {} elements ({}): give {} values, or set one by its name "
        "('{}')",
        name, idx->size(), fmt::join(names, ", "), idx->size(), names[0]);
  }
  if (group && *group >= s.groups.size()) return make_error("no parameter group {}", *group);
  for (size_t k = 0; k < idx->size(); ++k)  // all checked before any is set
    if (std::string why = ir::check_hyper(p.hypers[(*idx)[k]], values[k]); !why.empty())
      return Error{why};
  return idx;
}

void apply_hyper(OptimizerState& s, const std::vector<uint32_t>& hypers,
                 const std::vector<double>& values, std::optional<uint32_t> group) {
  for (uint32_t g = 0; g < s.groups.size(); ++g) {
    if (group && g != *group) continue;
    for (size_t k = 0; k < hypers.size(); ++k) s.groups[g].hypers[hypers[k]] = values[k];
  }
}

Status set_hyper(const ir::Program& p, OptimizerState& s, std::string_view name,
                 const std::vector<double>& values, std::optional<uint32_t> group) {
  auto idx = check_set_hyper(p, s, name, values, group);
  if (!idx) return idx.error();
  apply_hyper(s, *idx, values, group);
  return Status::Ok();
}

void initial_state(const plan::Plan& plan, size_t b, const TensorState& t, const GroupState& group,
                   uint8_t* out) {
  const ir::BufferDecl& buf = plan.buffers[b];
  const size_t bytes = buffer_bytes(plan, b, t);
  if (bytes == 0) return;
  std::memset(out, 0, bytes);
  const size_t owner = buf.per_block ? b - 1 : b;  // scales follow their codes
  const ir::BufferDecl& d = plan.buffers[owner];
  const double v = d.init.hyper ? group.hypers[*d.init.hyper] : d.init.value;
  if (holds_codes(plan, owner, t)) {
    // Every block holds v: each code the quantized v, each scale its block's. Zero is a zero
    // scale (torchao's zeros(); a format without a zero code, q4u, reads 0).
    const float x = static_cast<float>(v);
    uint8_t code = 0;
    float scale = ir::quantize_block(d.quant, &x, 1, &code);
    if (x == 0.0f) scale = 0.0f;
    if (ir::info(d.quant).bits == 4) code = static_cast<uint8_t>(code << 4 | code);
    if (!buf.per_block) std::memset(out, code, bytes);
    for (size_t k = 0; buf.per_block && k < bytes / 4; ++k) std::memcpy(out + 4 * k, &scale, 4);
  } else if (!buf.per_block && (v != 0 || std::signbit(v))) {
    for (int64_t i = 0; i < t.numel; ++i) store_element(out, buf.storage, i, v);
  }
}

void initial_scalar_states(const ir::Program& p, GroupState& group) {
  group.states.clear();
  for (const auto& st : p.states)
    group.states.push_back(st.init.hyper ? group.hypers[*st.init.hyper] : st.init.value);
}

Expected<OptimizerState> init_state(const plan::Plan& plan, const std::vector<HostTensor>& params,
                                    const std::vector<GroupSpec>& groups,
                                    const std::vector<int>& group_of, bool defer_state,
                                    const std::vector<std::optional<bool>>& quantize_of) {
  const ir::Program& p = plan.program;
  OptimizerState s;
  GroupState defaults;
  for (const auto& h : p.hypers) defaults.hypers.push_back(h.value);
  s.groups.assign(groups.size() + 1, defaults);
  for (size_t g = 0; g < groups.size(); ++g)
    for (const auto& [name, v] : groups[g].overrides) {
      if (name == kQuantizeState) {
        if (v != 0 && v != 1)
          return make_error(
              "parameter group {}: {} is {}: 1 quantizes its tensors' state, 0 "
              "keeps it in f32",
              g + 1, kQuantizeState, v);
        continue;
      }
      Status st = set_hyper(p, s, name, {v}, static_cast<uint32_t>(g + 1));
      if (!st) return make_error("parameter group {}: {}", g + 1, st.error().message);
    }
  for (auto& g : s.groups) initial_scalar_states(p, g);
  s.init_groups = s.groups;
  s.pending = defer_state;
  const DType param_type = p.buffers[p.param_buffer()].storage;
  int64_t elements = 0;
  for (const auto& t : params) {
    if (t.dtype != param_type)
      return make_error("parameter '{}' is {}, but the optimizer was built for {} parameters",
                        t.name, to_string(t.dtype), to_string(param_type));
    TensorState ts{.name = t.name,
                   .shape = t.shape,
                   .numel = t.numel(),
                   .whole = t.numel(),
                   .first = elements};
    elements += t.numel();
    const int explicit_group = s.tensors.size() < group_of.size() ? group_of[s.tensors.size()] : -1;
    if (explicit_group > static_cast<int>(groups.size()))
      return make_error("parameter '{}' is in group {}, but the groups are 0 (the default) to {}",
                        t.name, explicit_group, groups.size());
    if (explicit_group >= 0) ts.group = static_cast<uint32_t>(explicit_group);
    for (size_t g = 0; g < groups.size() && ts.group == 0 && explicit_group < 0; ++g)
      for (const auto& pat : groups[g].patterns)
        if (glob_match(pat, t.name)) ts.group = static_cast<uint32_t>(g + 1);
    if (const size_t i = s.tensors.size(); i < quantize_of.size() && quantize_of[i]) {
      ts.quantize = quantize_of[i];
    } else if (ts.group > 0) {
      const auto& o = groups[ts.group - 1].overrides;
      if (auto q = o.find(std::string(kQuantizeState)); q != o.end()) ts.quantize = q->second != 0;
    }
    OPTJIT_TRY(check_quantize(plan, ts));
    for (size_t bi = 0; bi < plan.buffers.size(); ++bi) {
      const auto& b = plan.buffers[bi];
      // A parameter given without its bytes is the caller's memory (the Optimizer API): then
      // neither it nor its gradient has a buffer here (each was the model's size again,
      // allocated and zeroed only to be thrown away). Otherwise the gradient starts at zeros.
      std::vector<uint8_t> buf;
      const bool callers = t.data.empty();
      if (b.role == BufferRole::param) {
        buf = t.data;
      } else if ((b.role != BufferRole::grad || !callers) &&
                 (b.role != BufferRole::state || !defer_state)) {
        OPTJIT_TRY(allocate(buf, buffer_bytes(plan, bi, ts), b, ts));
        if (b.role == BufferRole::state)
          initial_state(plan, bi, ts, s.groups[ts.group], buf.data());
      }
      ts.owned.push_back(std::move(buf));
      ts.external.push_back(nullptr);
      ts.device.push_back({});
    }
    s.tensors.push_back(std::move(ts));
  }
  return s;
}

bool pending(const plan::Plan& plan, size_t b, const TensorState& t) {
  return plan.buffers[b].role == BufferRole::state && t.owned[b].empty() && !t.external[b] &&
         !t.device[b] && buffer_bytes(plan, b, t) > 0;
}

Expected<bool> materialize(const plan::Plan& plan, OptimizerState& s) {
  if (!s.pending) return false;
  bool made = false;
  for (TensorState& t : s.tensors)
    for (size_t b = 0; b < plan.buffers.size(); ++b)
      if (pending(plan, b, t)) {
        OPTJIT_TRY(allocate(t.owned[b], buffer_bytes(plan, b, t), plan.buffers[b], t));
        initial_state(plan, b, t, s.init_groups[t.group], t.owned[b].data());
        made = true;
      }
  s.pending = false;
  if (made) s.bindings.changed();
  return made;
}

DType stored_type(const plan::Plan& plan, size_t b, const TensorState& t) {
  return holds_codes(plan, b, t) ? DType::u8 : plan.buffers[b].storage;
}

std::vector<int64_t> state_shape(const plan::Plan& plan, size_t b, const TensorState& t) {
  if (holds_codes(plan, b, t) && ir::info(plan.buffers[b].quant).bits != 8)
    return {ir::code_bytes(plan.buffers[b].quant, t.numel)};
  return t.shape;
}

Status check_quantize(const plan::Plan& plan, const TensorState& t) {
  if (!t.quantize.value_or(false)) return Status::Ok();
  for (const ir::BufferDecl& d : plan.buffers) {
    if (d.quant == ir::Quant::none || d.per_block) continue;
    const ir::QuantInfo& q = ir::info(d.quant);
    if (q.whole_blocks && t.whole % q.block != 0)
      return make_error(
          "parameter '{}' ({} elements) cannot keep its state '{}' quantized: format {} ({}) "
          "quantizes whole blocks of {} elements only",
          t.name, t.whole, d.name, q.name, q.description, q.block);
  }
  return Status::Ok();
}

bool holds_codes(const plan::Plan& plan, size_t b, const TensorState& t) {
  const ir::Quant q = plan.buffers[b].quant;
  return q != ir::Quant::none && t.quantize.value_or(ir::quantized_tensor(q, t.whole));
}

size_t buffer_bytes(const plan::Plan& plan, size_t b, const TensorState& t) {
  const ir::BufferDecl& d = plan.buffers[b];
  const auto n = static_cast<size_t>(t.numel);
  if (d.per_block)
    return holds_codes(plan, b - 1, t)
               ? static_cast<size_t>(ir::scale_count(plan.buffers[b - 1].quant, t.numel)) * 4
               : 0;
  if (holds_codes(plan, b, t)) return static_cast<size_t>(ir::code_bytes(d.quant, t.numel));
  return n * size_bytes(d.storage);
}

Status set_grads(const plan::Plan& plan, OptimizerState& s,
                 const std::vector<const HostTensor*>& grads) {
  const uint32_t gb = plan.program.grad_buffer();
  const DType gt = plan.buffers[gb].storage;
  if (grads.size() != s.tensors.size())
    return make_error("{} gradients for {} parameters", grads.size(), s.tensors.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    const HostTensor& g = *grads[i];
    TensorState& t = s.tensors[i];
    if (g.numel() != t.numel)
      return make_error("gradient '{}' has {} elements, its parameter {}", g.name, g.numel(),
                        t.numel);
    if (t.external[gb]) return make_error("gradient '{}' lives in the caller's memory", g.name);
    auto& buf = t.owned[gb];
    if (g.dtype == gt) {
      buf = g.data;
    } else {
      buf.resize(static_cast<size_t>(t.numel) * size_bytes(gt));  // (may have none yet)
      for (int64_t e = 0; e < t.numel; ++e) store_element(buf.data(), gt, e, g.get(e));
    }
  }
  return Status::Ok();
}

std::vector<HostTensor> parameters_of(TensorFile f) {
  auto it = f.metadata.find("optjit.params");
  if (it == f.metadata.end()) return std::move(f.tensors);
  std::vector<HostTensor> out;
  for (size_t pos = 0; pos <= it->second.size();) {
    size_t nl = it->second.find('\n', pos);
    std::string name =
        it->second.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    for (auto& t : f.tensors)
      if (t.name == name) out.push_back(std::move(t));
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  return out;
}

TensorFile export_state(const plan::Plan& plan, const OptimizerState& s) {
  const ir::Program& p = plan.program;
  TensorFile f;
  for (const auto& t : s.tensors) {
    for (size_t b = 0; b < p.buffers.size(); ++b) {
      const auto& decl = p.buffers[b];
      if (decl.role == BufferRole::grad) continue;
      std::string name =
          decl.role == BufferRole::param ? t.name : fmt::format("{}.{}", t.name, decl.name);
      // Quantized state: its codes (u8, the parameter's shape; 4-bit codes two to a byte,
      // flat, as torchao keeps them) and its scales (f32, one per block); a tensor too small to
      // quantize has neither, only its f32 values.
      if (decl.per_block) {
        if (holds_codes(plan, b - 1, t))
          f.tensors.push_back({name,
                               DType::f32,
                               {ir::scale_count(p.buffers[b - 1].quant, t.numel)},
                               t.bytes(b, buffer_bytes(plan, b, t))});
        continue;
      }
      f.tensors.push_back({name, stored_type(plan, b, t), state_shape(plan, b, t),
                           t.bytes(b, buffer_bytes(plan, b, t))});
      if (decl.quant != ir::Quant::none)
        f.metadata[fmt::format("optjit.quant.{}", decl.name)] = std::string(to_string(decl.quant));
    }
    for (size_t k = 0; k < p.states.size(); ++k) {
      HostTensor st =
          HostTensor::zeros(fmt::format("{}.{}", t.name, p.states[k].name), DType::f64, {});
      st.set(0, s.groups[t.group].states[k]);
      f.tensors.push_back(std::move(st));
    }
  }
  HostTensor step = HostTensor::zeros("step", DType::i64, {});
  step.set(0, static_cast<double>(s.step));
  f.tensors.push_back(std::move(step));
  f.metadata["format"] = "optjit-state-1";
  std::string names;
  for (const auto& t : s.tensors) names += (names.empty() ? "" : "\n") + t.name;
  f.metadata["optjit.params"] = names;
  return f;
}

namespace {

// One state buffer of one tensor from a checkpoint, converting values to this plan's format:
// codes (u8) with their scales go into a quantized buffer of the same format as they are;
// values of any float type are stored, quantized block by block where the buffer holds codes;
// codes of another format (the file's metadata names it) are their values, map[code] times
// their block's scale, as the Python bridge loads them.
Status import_buffer(const plan::Plan& plan, TensorState& t, size_t b, const HostTensor& h,
                     const TensorFile& f) {
  const ir::BufferDecl& decl = plan.buffers[b];
  const std::string name = fmt::format("{}.{}", t.name, decl.name);
  const bool codes = holds_codes(plan, b, t);
  std::optional<std::vector<float>> dequantized;  // codes of another format, as values
  if (h.dtype == DType::u8) {
    auto q = f.metadata.find(fmt::format("optjit.quant.{}", decl.name));
    if (q == f.metadata.end())
      return make_error(
          "state '{}' holds codes, but the file does not say their format (no 'optjit.quant.{}' "
          "metadata); this optimizer keeps it as {}",
          name, decl.name, codes ? to_string(decl.quant) : to_string(decl.storage));
    const std::optional<ir::Quant> saved = ir::parse_quant(q->second);
    if (!saved)
      return make_error("state '{}' holds codes of format '{}', which optjit does not know ({})",
                        name, q->second, ir::quant_names());
    const int64_t want = ir::code_bytes(*saved, t.numel);
    if (h.numel() != want)
      return make_error("state '{}' has {} codes, its parameter's {} elements need {}", name,
                        h.numel(), t.numel, want);
    const int64_t blocks = ir::scale_count(*saved, t.numel);
    const HostTensor* s = f.find(name + ".absmax");
    if (!s || s->dtype != DType::f32 || s->numel() != blocks)
      return make_error("state file has no f32 '{}.absmax' with {} blocks for its codes", name,
                        blocks);
    // A block's scale is its absmax (clipped, / 448 for fp8): never negative, which would
    // silently flip the signs of the block's values. NaN and Inf are what a diverged run saves,
    // and load as they are, as f32 state does.
    for (int64_t k = 0; k < blocks; ++k)
      if (const double v = s->get(k); v < 0)
        return make_error("state '{}.absmax' is {} at block {}: a block's scale is never negative",
                          name, v, k);
    if (codes && *saved == decl.quant) {
      std::memcpy(t.data(b), h.data.data(), static_cast<size_t>(want));
      std::memcpy(t.data(b + 1), s->data.data(), s->data.size());
      return Status::Ok();
    }
    std::vector<float> scales(static_cast<size_t>(blocks));
    std::memcpy(scales.data(), s->data.data(), scales.size() * 4);
    dequantized.emplace(static_cast<size_t>(t.numel));
    ir::dequantize(*saved, h.data.data(), scales.data(), t.numel, dequantized->data());
  } else if (!is_float(h.dtype)) {
    return make_error("state '{}' is {}, not a float type", name, to_string(h.dtype));
  }
  if (!codes) {
    for (int64_t e = 0; e < t.numel; ++e)
      store_element(t.data(b), decl.storage, e,
                    dequantized ? (*dequantized)[static_cast<size_t>(e)] : h.get(e));
    return Status::Ok();
  }
  std::vector<float> values;
  if (dequantized) {
    values = std::move(*dequantized);
  } else {
    values.resize(static_cast<size_t>(t.numel));
    for (int64_t e = 0; e < t.numel; ++e) values[e] = static_cast<float>(h.get(e));
  }
  // An unsigned map holds no negative value (the compiler proved this state never negative):
  // one in the file is not this optimizer's state, and quantizing it would change it silently.
  if (ir::unsigned_map(decl.quant))
    for (int64_t e = 0; e < t.numel; ++e)
      if (const float v = values[static_cast<size_t>(e)]; v < 0)
        return make_error(
            "state '{}' is {} at element {}, and this optimizer keeps it as {}, which holds only "
            "values >= 0: the file does not hold this optimizer's state (it is never negative)",
            name, v, e, to_string(decl.quant));
  std::vector<float> scales(static_cast<size_t>(ir::scale_count(decl.quant, t.numel)));
  ir::quantize(decl.quant, values.data(), t.numel, t.data(b), scales.data());
  std::memcpy(t.data(b + 1), scales.data(), scales.size() * 4);
  return Status::Ok();
}

}  // namespace

Status import_state(const plan::Plan& plan, OptimizerState& s, const TensorFile& f) {
  const ir::Program& p = plan.program;
  const HostTensor* step = f.find("step");
  if (!step || step->numel() != 1) return make_error("state file has no 0-d 'step' tensor");
  // A count of steps: a whole number, exact in the f64 the scalar program computes with. NaN
  // or 1e300 became an undefined integer, 2.5 silently 2.
  if (const double n = step->get(0); !(n >= 0 && n < kI64Limit && n == std::floor(n)))
    return make_error("state file's 'step' is {}, not a whole number of steps from 0 to 2^53", n);
  std::vector<std::vector<bool>> seen(s.groups.size(), std::vector<bool>(p.states.size(), false));
  for (auto& t : s.tensors) {
    for (size_t b = 0; b < p.buffers.size(); ++b) {
      const auto& decl = p.buffers[b];
      if (decl.role != BufferRole::state || decl.per_block) continue;
      std::string name = fmt::format("{}.{}", t.name, decl.name);
      const HostTensor* h = f.find(name);
      if (!h) return make_error("state file has no '{}'", name);
      if (h->dtype != DType::u8 && h->numel() != t.numel)  // codes: checked with their format
        return make_error("state '{}' has {} elements, its parameter {}", name, h->numel(),
                          t.numel);
      OPTJIT_TRY(import_buffer(plan, t, b, *h, f));
    }
    for (size_t k = 0; k < p.states.size(); ++k) {
      std::string name = fmt::format("{}.{}", t.name, p.states[k].name);
      const HostTensor* h = f.find(name);
      if (!h || h->numel() != 1) return make_error("state file has no 0-d '{}'", name);
      double v = h->get(0);
      double& dst = s.groups[t.group].states[k];
      if (seen[t.group][k] && dst != v)
        return make_error("state '{}' differs from other tensors in its parameter group", name);
      dst = v;
      seen[t.group][k] = true;
    }
  }
  s.step = static_cast<int64_t>(step->get(0));
  return Status::Ok();
}

}  // namespace optjit::runtime
