#pragma once
/// A callback that keeps fit's thread pool at the cores other processes leave free (see
/// autodiff/tensor/core_share.hpp): on a machine where another process keeps a core busy, training
/// then costs that core and no more. mixprec-train uses it unless --threads fixes the count.

#include <mixprec/autodiff/tensor/core_share.hpp>
#include <mixprec/models/training/callback.hpp>

namespace mixprec::models {

class ShareCores final : public Callback {
  public:
    explicit ShareCores(autodiff::CoreShareOptions options = {}) : share_(options) {}
    void on_step_end(FitContext&, const StepLogs&) override { share_.update(); }
    const autodiff::CoreShare& share() const { return share_; }

  private:
    autodiff::CoreShare share_;
};

} // namespace mixprec::models
