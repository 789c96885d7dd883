// The C++ DSL: declare transforms (hyperparameters, flags, state, an element-wise rule) and
// chain them, optax-style. Built-in optimizers, clipping and schedules use only this header.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "ir/error.h"
#include "ir/program.h"

namespace optjit::dsl {

class Ctx;

/// A value being built: wraps an IR value, with arithmetic that promotes like PyTorch
/// (a scalar f64 meeting an element f32 is rounded to f32; integers meet floats as floats).
class Value {
 public:
  Value() = default;
  Value(Ctx* ctx, ir::ValueId id) : ctx_(ctx), id_(id) {}
  ir::ValueId id() const { return id_; }
  Ctx* ctx() const { return ctx_; }
  DType type() const;
  Rank rank() const;
  bool valid() const { return ctx_ != nullptr; }

 private:
  Ctx* ctx_ = nullptr;
  ir::ValueId id_ = ir::kNoValue;
};

Value operator+(Value a, Value b);
Value operator-(Value a, Value b);
Value operator*(Value a, Value b);
Value operator/(Value a, Value b);
Value operator-(Value a);
Value operator+(Value a, double b);
Value operator-(Value a, double b);
Value operator*(Value a, double b);
Value operator/(Value a, double b);
Value operator+(double a, Value b);
Value operator-(double a, Value b);
Value operator*(double a, Value b);
Value operator/(double a, Value b);
Value operator<(Value a, Value b);
Value operator<=(Value a, Value b);
Value operator>(Value a, Value b);
Value operator>=(Value a, Value b);
Value operator==(Value a, Value b);
Value operator!=(Value a, Value b);
Value operator<(Value a, double b);
Value operator>(Value a, double b);
Value operator==(Value a, double b);
Value operator!=(Value a, double b);
Value operator&&(Value a, Value b);
Value operator||(Value a, Value b);
Value operator!(Value a);

Value sqrt(Value a);
Value rsqrt(Value a);
Value exp(Value a);
Value log(Value a);
Value abs(Value a);
Value sign(Value a);
Value floor(Value a);
Value cos(Value a);
Value is_finite(Value a);
Value pow(Value a, Value b);
Value pow(Value a, double b);
Value pow(double a, Value b);
Value min(Value a, Value b);
Value max(Value a, Value b);
Value min(Value a, double b);
Value max(Value a, double b);
/// a * b + c rounded once (a fused multiply-add), in the type the three meet in (f64 for
/// integers): how PyTorch's vectorized CPU kernels and its CUDA kernels compute `add(x, alpha)`,
/// `addcmul` and `lerp`. Every backend gives the correctly rounded result.
Value fma(Value a, Value b, Value c);
/// cond ? a : b, elementwise.
Value select(Value cond, Value a, Value b);
Value select(Value cond, Value a, double b);
Value clamp(Value x, Value lo, Value hi);
/// x mod y with the sign of y, as Python's %: x - y * floor(x / y), in the wider of their types.
/// Exact for whole numbers below 2^53 (step counts: `mod(step - 1, k) == 0` every k-th step).
Value mod(Value x, Value y);
/// torch.lerp: a + w * (b - a), evaluated the way torch does for |w| < 0.5 and otherwise
/// (b + (w - 1) * (b - a)), each as one fused multiply-add.
Value lerp(Value a, Value b, Value w);
/// a as type t, rounded to it where the cast is, on every backend as in the reference:
/// `cast(cast(x, DType::bf16), DType::f32)` is x rounded to bf16 (to nearest even), as a value
/// (bf16 and f16 values are computed in f32 otherwise). Inf and NaN cast to i64 are 0.
Value cast(Value a, DType t);

/// Reductions: over every element of every tensor (a scalar) or of each tensor (per tensor).
Value sum(Value a, ir::Scope scope = ir::Scope::all);
Value sumsq(Value a, ir::Scope scope = ir::Scope::all);
Value max_abs(Value a, ir::Scope scope = ir::Scope::all);
Value any_nonfinite(Value a, ir::Scope scope = ir::Scope::all);

struct Bound;

/// A transform or schedule argument: a number, a tuple of numbers, a bool, a string, or a
/// schedule (wherever a hyperparameter is schedulable, e.g. `lr`).
struct Arg {
  std::variant<double, std::vector<double>, bool, std::string, std::shared_ptr<const Bound>> v;
  Arg(double x) : v(x) {}                          // NOLINT(google-explicit-constructor)
  Arg(int x) : v(static_cast<double>(x)) {}        // NOLINT(google-explicit-constructor)
  Arg(std::vector<double> x) : v(std::move(x)) {}  // NOLINT(google-explicit-constructor)
  Arg(std::initializer_list<double> x) : v(std::vector<double>(x)) {}
  Arg(bool x) : v(x) {}                                     // NOLINT(google-explicit-constructor)
  Arg(const char* x) : v(std::string(x)) {}                 // NOLINT(google-explicit-constructor)
  Arg(std::string x) : v(std::move(x)) {}                   // NOLINT(google-explicit-constructor)
  Arg(std::shared_ptr<const Bound> s) : v(std::move(s)) {}  // NOLINT(google-explicit-constructor)
};
using Args = std::map<std::string, Arg, std::less<>>;

/// A numeric hyperparameter: a runtime scalar (changing it never recompiles). A tuple
/// hyperparameter such as `betas` has one default per element, named betas.0, betas.1.
/// Where a hyperparameter's values may lie, and what to call it when one does not.
struct HyperBounds {
  std::vector<ir::Interval> allowed;  // empty: anywhere
  bool whole = false;                 // a count of steps
  std::string rule;                   // "the learning rate"
  bool step_limit = false;            // ir::HyperDecl::step_limit
};

struct HyperSpec {
  std::string name;
  std::vector<double> defaults;  // empty: required; size 2: a pair
  std::string doc;
  bool schedulable = false;  // may be given a learning-rate schedule
  size_t arity = 1;          // 0: a tuple of any length (at least one)
  /// The conditions of the constructor the transform follows (torch.optim.Adam: 0 <= lr,
  /// 0 <= betas[i] < 1): empty, none; one entry, for every element; else one per element.
  /// Checked where a value is given (the text form, bind, set_hyper, --set, --group).
  std::vector<HyperBounds> bounds;
  const HyperBounds* bounds_of(size_t k) const {
    if (bounds.empty()) return nullptr;
    return &bounds[bounds.size() == 1 ? 0 : std::min(k, bounds.size() - 1)];
  }
};

/// A structural option (a bool or a string): part of the compiled program.
struct OptionSpec {
  std::string name;
  std::variant<bool, std::string> default_value;
  std::string doc;
  std::vector<std::string> choices;  // for string options
};

enum class DefKind { transform, schedule };

/// What a transform or schedule is. `apply` reads and replaces ctx.grad()/ctx.param();
/// `value` returns a schedule's value for this step (scalar).
struct Def {
  std::string name;
  DefKind kind = DefKind::transform;
  std::string doc;
  std::vector<HyperSpec> hypers;
  std::vector<OptionSpec> options;
  std::function<void(Ctx&)> apply;
  std::function<Value(Ctx&)> value;

  const HyperSpec* find_hyper(std::string_view n) const;
  const OptionSpec* find_option(std::string_view n) const;
};

/// A Def with its arguments checked.
struct Bound {
  std::shared_ptr<const Def> def;
  Args args;
};

/// Every transform, built-in or custom, also takes `state_format`: how its per-element state
/// is stored. One format for all of its states ("bf16"), per state ("exp_avg_sq:f32"), or both
/// ("bf16,exp_avg_sq:f32"). Formats: f32, bf16, f16 (rounded to nearest even when stored;
/// computed in the parameters' compute type), bf16_sr (bf16, rounded stochastically), q8 and
/// q8u (8-bit blockwise with bitsandbytes' signed / unsigned dynamic map, ir/quant.h; an
/// unsigned format only for a state the compiler proves never negative, ir/sign.h), 8bit
/// (bitsandbytes' choice for its 8-bit optimizers: q8u for the Adam family's second moments
/// exp_avg_sq and max_exp_avg_sq, q8 for every other state), f8 (torchao's fp8; also named
/// fp8, as torchao's AdamWFp8), q4 and q4u (torchao's 4-bit maps, block 128), and 4bit
/// (torchao's choice for AdamW4bit: q4u for the second moments, q4 elsewhere). Without it,
/// state is stored as the parameters are.
inline constexpr std::string_view kStateFormat = "state_format";
struct StateFormat {
  DType storage = DType::f32;
  /// bf16 with stochastic rounding (ir/stochastic_round.h), keyed by the program's
  /// `state_seed` hyperparameter, the step and the element's place among all the parameters.
  bool stochastic = false;
  ir::Quant quant = ir::Quant::none;  // block-quantized (storage is then f32 for small tensors)
  /// "8bit" and "4bit": the format of the second moments (never negative), `quant` the others'.
  ir::Quant second_moment = ir::Quant::none;
};
struct StateFormats {
  std::optional<StateFormat> all;
  std::map<std::string, StateFormat, std::less<>> by_name;
};
Expected<StateFormats> parse_state_formats(std::string_view text);
/// The formats `state_format` accepts, for messages and `optjit list`.
std::string state_format_names();

/// Checks `args` against `def` (names, kinds, arity, required ones) and binds them.
Expected<std::shared_ptr<const Bound>> bind(std::shared_ptr<const Def> def, Args args);

using Pipeline = std::vector<std::shared_ptr<const Bound>>;

/// Storage types of the buffers a program reads and writes.
struct DTypes {
  DType param = DType::f32;
  DType grad = DType::f32;
  DType state = DType::f32;
  /// bf16 parameters stored with stochastic rounding (torchao's bf16_stochastic_round), keyed
  /// like bf16_sr state. Other dtypes are stored as they are; every program still declares
  /// `state_seed`, so the programs of one optimizer's dtypes keep one set of hyperparameters.
  bool param_stochastic = false;
};

/// Lowers a chain of transforms to one verified IR program.
Expected<ir::Program> lower(const Pipeline& pipeline, DTypes dtypes = {});

/// How a state starts: a constant, or the value a hyperparameter has when the state is created.
struct StateInit {
  double value = 0;
  std::string hyper;  // non-empty: take this hyperparameter of the same transform
  StateInit(double v = 0) : value(v) {}  // NOLINT(google-explicit-constructor)
  static StateInit from_hyper(std::string name) {
    StateInit s;
    s.hyper = std::move(name);
    return s;
  }
};

/// What a transform's rule sees while it is being built.
class Ctx {
 public:
  /// The update flowing through the chain (starts as the gradient) and the parameter.
  Value grad() const { return grad_; }
  Value param() const { return param_; }
  void set_grad(Value v);
  void set_param(Value v);
  /// From here on the parameters are an exact f32 master copy kept as state ("master"),
  /// taken from the parameters where it has no value yet (its first step, or a checkpoint
  /// without it); the parameters are stored rounded from it at the end of the step.
  void use_master_weights(bool low16 = false);

  /// This transform's hyperparameter (element k of a tuple), resolving schedules.
  Value hyper(std::string_view name, size_t k = 0);
  /// The value given when the pipeline was built: for structural choices (e.g. whether SGD
  /// keeps a momentum buffer). Not allowed for a scheduled hyperparameter.
  double initial(std::string_view name, size_t k = 0);
  /// Narrows where this transform's hyperparameter may be set later (set_hyper), where the
  /// bounds depend on an option: sgd's nesterov=true needs momentum > 0 and dampening 0.
  void constrain(std::string_view name, HyperBounds bounds, size_t k = 0);
  /// Number of elements given for a tuple hyperparameter (variable-length ones: milestones).
  size_t hyper_size(std::string_view name);
  bool flag(std::string_view name) const;
  std::string option(std::string_view name) const;

  /// 1-based step count, as f64.
  Value step();
  /// Elements in the current tensor, as f64 (tensor rank).
  Value numel();
  /// Whether the current tensor keeps this transform's per-element state `name` (declared
  /// before) as block-quantized codes: b1, tensor rank; false where its format is not
  /// quantized or the tensor is under the format's least size (bitsandbytes' min_8bit_size),
  /// which then keeps it in its storage type. bitsandbytes steps such tensors with its 32-bit
  /// kernel's formula.
  Value holds_codes(std::string_view name);
  Value constant(double v);
  /// A per-element state buffer of this transform: its current value (as last set in this
  /// step, else as it was before the step). Declared on first use.
  Value state(std::string_view name, StateInit init = {});
  void set_state(std::string_view name, Value v);
  /// A per-group f64 value carried across steps (e.g. NAdam's mu_product).
  Value scalar_state(std::string_view name, StateInit init = {});
  void set_scalar_state(std::string_view name, Value v);
  /// A state that starts from a value of its first step (the parameter, for Prodigy's or
  /// Lookahead's starting point; the first gradient; any expression), as torch's optimizers
  /// create state lazily in their first step(): `first` at step 1, after that what it was
  /// set to. Such a state is written every step, even where nothing sets it after step 1.
  Value state_from(std::string_view name, Value first);
  Value scalar_state_from(std::string_view name, Value first);
  /// If cond (scalar b1) is true, the step is skipped: nothing at all is written.
  void skip_step_if(Value cond);

  /// Records a user error (the first one wins); building continues with a dummy value.
  void fail(Error e);

  // Used by Value's operators.
  ir::Builder& builder() { return b_; }
  DType element_type() const { return element_type_; }
  /// The storage types of the parameters, gradients and state this program is lowered for.
  DTypes dtypes() const { return dtypes_; }
  Value wrap(ir::ValueId id) { return Value(this, id); }

 private:
  friend Expected<ir::Program> lower(const Pipeline&, DTypes);
  struct Frame {
    const Bound* bound;
    std::string prefix;  // unique name of this transform or schedule instance
  };
  struct StateSlot {
    uint32_t index;
    Value current;
    bool scalar;
  };
  StateFormat state_format(std::string_view name);
  void check_state_formats();
  Value stochastic_round(Value x, uint32_t buffer);
  uint32_t seed_hyper();
  std::set<std::string> formatted_;      // state keys whose format was named
  std::set<std::string> stochastic_;     // state keys stored in bf16_sr
  std::optional<DType> forced_storage_;  // the next state's storage, whatever the format
  std::string master_key_;               // use_master_weights()' state
  bool master_low16_ = false;            // ... holding only the master's low 16 bits
  Ctx(DTypes dtypes);
  const Frame& frame() const { return frames_.back(); }
  std::string state_key(std::string_view name) const;
  Value declare(std::string_view name, StateInit init, bool scalar,
                std::optional<Value> first = std::nullopt);
  void assign(std::string_view name, Value v, bool scalar);
  std::optional<uint32_t> resolve_init_hyper(const StateInit& init);
  Value lazy_init(Value loaded, const StateInit& init);

  ir::Builder b_;
  DTypes dtypes_;
  DType element_type_;
  Value grad_, param_;
  std::vector<Frame> frames_;
  std::map<std::string, Value, std::less<>> hyper_cache_;
  std::map<std::string, StateSlot, std::less<>> states_;  // by full name
  std::map<std::string, int, std::less<>> instance_count_;
  std::optional<Error> error_;
  std::vector<ir::ValueId> skips_;
};

}  // namespace optjit::dsl
