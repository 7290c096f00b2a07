#include <mixprec/autodiff/tape.hpp>

#include <mixprec/autodiff/tensor/kernels_elementwise.hpp>
#include <mixprec/autodiff/variable.hpp>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace mixprec::autodiff {
namespace {

/// The tapes recording on this thread, oldest first.
thread_local std::vector<GradientTape*> active_tapes;

/// The name of the outermost OpScope open on this thread, or null.
thread_local std::shared_ptr<const std::string> current_scope;

/// Which inputs of the op whose backward function runs now the running tape wants (empty: all).
thread_local std::vector<bool> inputs_wanted;

/// Sets inputs_wanted for one backward call, and restores it after (even when the call throws).
struct wanted_scope {
    std::vector<bool> outer;
    explicit wanted_scope(std::vector<bool> wanted) : outer(std::exchange(inputs_wanted, std::move(wanted))) {}
    ~wanted_scope() { inputs_wanted = std::move(outer); }
    wanted_scope(const wanted_scope&) = delete;
    wanted_scope& operator=(const wanted_scope&) = delete;
};

} // namespace

OpScope::OpScope(std::string name) : outermost_(current_scope == nullptr) {
    if (outermost_) current_scope = std::make_shared<const std::string>(std::move(name));
}

OpScope::~OpScope() {
    if (outermost_) current_scope.reset();
}

GradientTape::GradientTape(GradientTapeOptions options) : options_(options) { active_tapes.push_back(this); }

GradientTape::~GradientTape() { stop_recording(); }

void GradientTape::stop_recording() {
    if (!recording_) return;
    recording_ = false;
    active_tapes.erase(std::remove(active_tapes.begin(), active_tapes.end(), this), active_tapes.end());
}

void GradientTape::watch(const Tensor& tensor) {
    if (recording_) watched_.insert(tensor.id());
}

void GradientTape::watch(const Variable& variable) {
    if (!recording_) return;
    const Tensor value = variable.read(); // refreshes the working copy if needed
    watched_.insert(value.id());
    auto& reads = variable_reads_[variable.uid()];
    if (std::none_of(reads.begin(), reads.end(), [&](const Input& r) { return r.id == value.id(); }))
        reads.push_back({value.id(), value.shape(), value.dtype()});
}

bool should_record(std::initializer_list<const Tensor*> inputs) {
    return should_record(std::span<const Tensor* const>(inputs.begin(), inputs.size()));
}

void record(const Tensor& output, std::initializer_list<const Tensor*> inputs, BackwardFn backward) {
    record(output, std::span<const Tensor* const>(inputs.begin(), inputs.size()), std::move(backward));
}

bool should_record(std::span<const Tensor* const> inputs) {
    for (const GradientTape* tape : active_tapes)
        for (const Tensor* t : inputs)
            if (tape->watched_.count(t->id()) != 0) return true;
    return false;
}

void record(const Tensor& output, std::span<const Tensor* const> inputs, BackwardFn backward) {
    std::shared_ptr<BackwardFn> shared;
    for (GradientTape* tape : active_tapes) {
        const bool watches = std::any_of(inputs.begin(), inputs.end(),
                                         [&](const Tensor* t) { return tape->watched_.count(t->id()) != 0; });
        if (!watches) continue;
        if (!shared) shared = std::make_shared<BackwardFn>(std::move(backward));
        GradientTape::Entry entry{{}, output.id(), shared, current_scope};
        auto& order = tape->scope_order_;
        if (current_scope && (order.empty() || order.back() != *current_scope) &&
            std::find(order.begin(), order.end(), *current_scope) == order.end())
            order.push_back(*current_scope);
        entry.inputs.reserve(inputs.size());
        for (const Tensor* t : inputs)
            entry.inputs.push_back({t->id(), t->shape(), t->dtype(), tape->watched_.count(t->id()) != 0});
        tape->entries_.push_back(std::move(entry));
        tape->watched_.insert(output.id());
    }
}

void notify_variable_read(std::uint64_t variable_uid, const Tensor& value) {
    for (GradientTape* tape : active_tapes) {
        if (!tape->options_.watch_accessed_variables) continue;
        tape->watched_.insert(value.id());
        auto& reads = tape->variable_reads_[variable_uid];
        if (std::none_of(reads.begin(), reads.end(), [&](const auto& r) { return r.id == value.id(); }))
            reads.push_back({value.id(), value.shape(), value.dtype()});
    }
}

void want_gradient_stats(const Tensor& tensor) {
    for (GradientTape* tape : active_tapes)
        if (tape->options_.telemetry) tape->stats_wanted_.insert(tensor.id());
}

bool gradient_needed(std::size_t input) { return input >= inputs_wanted.size() || inputs_wanted[input]; }

Tensor stop_gradient(const Tensor& x) { return x.reshape(x.shape()); }

std::vector<std::optional<Tensor>> GradientTape::run(const Tensor& target, const std::vector<Input>& sources,
                                                     Unconnected mode) {
    if (used_)
        throw std::logic_error("GradientTape::gradient called twice on a non-persistent tape "
                               "(construct it with {.persistent = true} to ask for several gradients)");
    if (watched_.count(target.id()) == 0)
        throw std::logic_error("GradientTape::gradient: the target " + target.description() +
                               " was not recorded by this tape (compute it inside the tape from watched "
                               "tensors or trainable variables)");
    if (!options_.persistent) {
        used_ = true;
        stop_recording();
    }

    std::unordered_set<std::uint64_t> wanted;
    for (const Input& s : sources) wanted.insert(s.id);
    const RoundingRecorderOptions recording{.histogram = options_.telemetry_histogram};
    std::optional<RoundingRecorder> pass;       // the whole reverse pass: what produced each gradient
    std::unordered_set<std::uint64_t> measured; // the ids whose gradient_stats to keep
    if (options_.telemetry) {
        measured = stats_wanted_;
        gradient_stats_.clear();
        variable_stats_.clear();
        scope_stats_.clear();
        for (const auto& [uid, reads] : variable_reads_)
            for (const Input& r : reads) measured.insert(r.id);
        pass.emplace(recording);
    }
    std::unordered_map<std::uint64_t, Tensor> grads;
    grads.emplace(target.id(), Tensor::full(target.shape(), 1.0f, target.dtype()));

    const auto accumulate = [&](const Input& input, Tensor g) {
        if (g.shape() != input.shape || g.dtype() != input.dtype)
            throw std::logic_error("GradientTape: a backward function returned a " + g.description() +
                                   " gradient for a " + std::string(name_of(input.dtype)) + " " +
                                   input.shape.to_string() + " input");
        auto [it, fresh] = grads.try_emplace(input.id, g);
        if (!fresh) it->second = kernels::add(it->second, g);
    };

    for (auto e = entries_.rbegin(); e != entries_.rend(); ++e) {
        auto it = grads.find(e->output);
        if (it != grads.end()) {
            const Tensor dy = it->second;
            if (wanted.count(e->output) == 0) grads.erase(it); // nothing upstream reads it again
            std::vector<bool> wanted_inputs(e->inputs.size());
            for (std::size_t i = 0; i < e->inputs.size(); ++i) wanted_inputs[i] = e->inputs[i].watched;
            if (pass) pass->also_add_to(&scope_stats_[e->scope ? *e->scope : std::string()]);
            Gradients g;
            {
                const wanted_scope scope(std::move(wanted_inputs));
                g = (*e->backward)(dy);
            }
            if (g.size() != e->inputs.size())
                throw std::logic_error("GradientTape: a backward function returned the wrong number of gradients");
            for (std::size_t i = 0; i < g.size(); ++i)
                if (g[i] && e->inputs[i].watched) accumulate(e->inputs[i], std::move(*g[i]));
            if (pass) {
                pass->also_add_to(nullptr);
                for (std::size_t i = 0; i < g.size(); ++i)
                    if (g[i] && e->inputs[i].watched && measured.count(e->inputs[i].id) != 0)
                        gradient_stats_[e->inputs[i].id] = pass->stats_of(grads.at(e->inputs[i].id));
            }
        }
        if (!options_.persistent) e->backward.reset(); // free what the closure captured
    }
    if (!options_.persistent) entries_.clear();

    std::vector<std::optional<Tensor>> out;
    out.reserve(sources.size());
    for (const Input& s : sources) {
        auto it = grads.find(s.id);
        if (it != grads.end())
            out.emplace_back(it->second);
        else if (mode == Unconnected::zero)
            out.emplace_back(Tensor(s.shape, s.dtype));
        else
            out.emplace_back(std::nullopt);
    }
    return out;
}

namespace {
std::vector<Tensor> unwrap(std::vector<std::optional<Tensor>> gs) {
    std::vector<Tensor> out;
    out.reserve(gs.size());
    for (auto& g : gs) out.push_back(std::move(*g));
    return out;
}
} // namespace

std::vector<Tensor> GradientTape::gradient(const Tensor& target, const std::vector<Tensor>& sources) {
    std::vector<Input> in;
    for (const Tensor& s : sources) in.push_back({s.id(), s.shape(), s.dtype()});
    return unwrap(run(target, in, Unconnected::zero));
}

std::vector<std::optional<Tensor>> GradientTape::gradient_or_none(const Tensor& target,
                                                                  const std::vector<Tensor>& sources) {
    std::vector<Input> in;
    for (const Tensor& s : sources) in.push_back({s.id(), s.shape(), s.dtype()});
    return run(target, in, Unconnected::none);
}

void GradientTape::check_watched(const std::vector<Variable>& sources) const {
    for (const Variable& v : sources) {
        if (variable_reads_.count(v.uid()) != 0) continue;
        std::string message = "GradientTape::gradient: variable '" + v.name() + "' ";
        if (!v.trainable())
            message += "is not trainable, so reading it does not watch it: leave it out of the sources "
                       "(trainable_variables() does), or call tape.watch(variable) to differentiate with respect "
                       "to it";
        else if (!options_.watch_accessed_variables)
            message += "was never watched by this tape, which was made with watch_accessed_variables = false: "
                       "call tape.watch(variable) while it records";
        else
            message += "was never read while this tape was recording (read it inside the tape's scope, or call "
                       "tape.watch(variable)); a value read before the tape was created is not watched, and its "
                       "gradient would silently be zero";
        throw std::logic_error(message);
    }
}

std::vector<std::optional<Tensor>>
GradientTape::variable_gradients(const Tensor& target, const std::vector<Variable>& sources, Unconnected mode) {
    // A variable's gradient is the sum over the values of it this tape saw (usually one).
    std::vector<Input> in;
    std::vector<std::pair<std::size_t, std::size_t>> ranges; // [begin, end) in `in` per variable
    for (const Variable& v : sources) {
        const std::size_t begin = in.size();
        auto it = variable_reads_.find(v.uid());
        if (it != variable_reads_.end()) in.insert(in.end(), it->second.begin(), it->second.end());
        ranges.emplace_back(begin, in.size());
    }
    auto gs = run(target, in, Unconnected::none);
    std::vector<std::optional<Tensor>> out;
    out.reserve(sources.size());
    for (std::size_t i = 0; i < sources.size(); ++i) {
        const auto [begin, end] = ranges[i];
        std::optional<Tensor> sum;
        std::optional<RoundingRecorder> adding; // only where a variable's reads add up (rarely)
        if (options_.telemetry && end - begin > 1)
            adding.emplace(RoundingRecorderOptions{.histogram = options_.telemetry_histogram});
        std::optional<RoundingStats> stats;
        for (std::size_t j = begin; j < end; ++j) {
            if (!gs[j]) continue;
            sum = !sum ? *gs[j] : kernels::add(*sum, gs[j]->to(sum->dtype()));
            if (!stats) {
                auto it = gradient_stats_.find(in[j].id);
                if (it != gradient_stats_.end()) stats = it->second;
            } else {
                stats = adding->stats_of(*sum);
            }
        }
        if (stats) variable_stats_[sources[i].uid()] = std::move(*stats);
        if (!sum && mode == Unconnected::zero) {
            const Dtype dtype = begin < end ? in[begin].dtype : sources[i].working_dtype();
            sum = Tensor(sources[i].shape(), dtype);
        }
        out.push_back(std::move(sum));
    }
    return out;
}

std::optional<RoundingStats> GradientTape::gradient_stats(const Tensor& tensor) const {
    auto it = gradient_stats_.find(tensor.id());
    if (it == gradient_stats_.end()) return std::nullopt;
    return it->second;
}

std::optional<RoundingStats> GradientTape::gradient_stats(const Variable& variable) const {
    auto it = variable_stats_.find(variable.uid());
    if (it == variable_stats_.end()) return std::nullopt;
    return it->second;
}

RoundingStats GradientTape::scope_stats(const std::string& name) const {
    auto it = scope_stats_.find(name);
    return it == scope_stats_.end() ? RoundingStats{} : it->second;
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target, const std::vector<Variable>& sources) {
    if (!used_) check_watched(sources);
    return unwrap(variable_gradients(target, sources, Unconnected::zero));
}

std::vector<std::optional<Tensor>> GradientTape::gradient_or_none(const Tensor& target,
                                                                  const std::vector<Variable>& sources) {
    return variable_gradients(target, sources, Unconnected::none);
}

} // namespace mixprec::autodiff
