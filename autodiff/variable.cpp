#include <mixprec/autodiff/variable.hpp>

#include <mixprec/autodiff/tensor/rounding.hpp>

#include <mixprec/autodiff/tape_hooks.hpp>

#include <atomic>

namespace mixprec::autodiff {

Variable::Variable(const Tensor& initial, std::string name, bool trainable) : state_(std::make_shared<State>()) {
    static std::atomic<std::uint64_t> counter{1};
    state_->master = initial.to(Dtype::float32).clone();
    state_->name = std::move(name);
    state_->trainable = trainable;
    state_->uid = counter.fetch_add(1, std::memory_order_relaxed);
}

void Variable::set_working_dtype(Dtype dtype) {
    if (dtype == state_->working_dtype) return;
    state_->working_dtype = dtype;
    state_->working_valid = false;
}

Tensor Variable::read() const {
    State& s = *state_;
    if (!s.working_valid) {
        const RoundingPause pause; // a working copy is not what rounding telemetry watches
        s.working = s.working_dtype == Dtype::float32 ? s.master : s.master.to(s.working_dtype);
        s.working_valid = true;
    }
    if (s.trainable) notify_variable_read(s.uid, s.working);
    return s.working;
}

void Variable::assign(const Tensor& value) {
    check_same_shape(state_->master, value, ("Variable::assign to '" + state_->name + "'").c_str());
    state_->master = value.to(Dtype::float32).clone();
    state_->working_valid = false;
}

} // namespace mixprec::autodiff
