#pragma once
/// Variable: a trainable value. The master copy is float32; ops read a working copy in the working
/// dtype (float16 under a mixed_float16 policy), rounded once from the master and cached until the
/// master changes. Copies of a Variable refer to the same variable, as in Keras.

#include <mixprec/autodiff/tensor/tensor.hpp>

#include <memory>
#include <span>
#include <string>

namespace mixprec::autodiff {

class Variable {
  public:
    /// `initial` (any dtype) becomes the float32 master, exactly.
    explicit Variable(const Tensor& initial, std::string name = "variable", bool trainable = true);

    const std::string& name() const { return state_->name; }
    const Shape& shape() const { return state_->master.shape(); }
    bool trainable() const { return state_->trainable; }
    /// Freezes (false) or unfreezes the variable, for every handle to it. A variable that is not trainable
    /// is not watched by tapes that watch accessed variables, exactly as one created non-trainable; a tape
    /// that watches it explicitly still differentiates it. Its master and working copy are unchanged.
    void set_trainable(bool trainable) { state_->trainable = trainable; }
    /// Unique per variable (not per copy of the handle).
    std::uint64_t uid() const { return state_->uid; }

    /// The float32 master.
    const Tensor& value() const { return state_->master; }

    Dtype working_dtype() const { return state_->working_dtype; }
    /// float32 means ops read the master itself.
    void set_working_dtype(Dtype dtype);

    /// The value for computation: the working copy, round(master) in the working dtype. Recording tapes
    /// that watch accessed variables start watching it (if the variable is trainable).
    Tensor read() const;

    /// Replaces the master (same shape; any dtype, converted to float32).
    void assign(const Tensor& value);
    /// The master's floats, for optimizers that update in place; call mark_changed() afterwards so the
    /// working copy is refreshed on the next read.
    std::span<float> master_data() { return state_->master.data<float>(); }
    void mark_changed() { state_->working_valid = false; }

    friend bool operator==(const Variable& a, const Variable& b) { return a.state_ == b.state_; }

  private:
    struct State {
        Tensor master; // float32
        mutable Tensor working;
        mutable bool working_valid = false;
        Dtype working_dtype = Dtype::float32;
        std::string name;
        bool trainable = true;
        std::uint64_t uid = 0;
    };
    std::shared_ptr<State> state_;
};

} // namespace mixprec::autodiff
